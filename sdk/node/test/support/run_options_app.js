'use strict';
// App.run's `listen` option (test/runtime.test.js): $RUN_LISTEN is the option, "null" for null.
const { App } = require('../../index');

const app = new App({ concurrency: 2 });
app.job('run.echo', async (args) => args, { cancellable: true });
const listen = process.env.RUN_LISTEN;
app.run({ listen: listen === 'null' ? null : listen });
