// The same package imported from an ES module.
import { App, Snooze } from 'soniq-handler';

const app = new App({ concurrency: 2 });
app.job('esm.add', ({ a, b }) => ({ sum: a + b }), { cancellable: true });
app.job('esm.snooze', () => new Snooze(1, null), { cancellable: true });
app.run();
