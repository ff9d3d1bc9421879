// The package's types seen from an ES module.
import { App, Snooze, type JobHandler } from 'soniq-handler';

const add: JobHandler<{ a: number; b: number }> = ({ a, b }) => ({ sum: a + b });
const app = new App({ concurrency: 2, maxFrameBytes: 1 << 20 });
app.job('esm.add', add, { cancellable: true }).job('esm.snooze', () => new Snooze(1), { cancellable: true }).run();
