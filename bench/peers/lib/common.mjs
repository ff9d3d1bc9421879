// The part every Node peer shares: the process modes the bench driver
// (bench/peers.go) runs, the command loop of the producer ("client") process,
// and the result line a worker prints when it stops. Each peer's peer.mjs
// supplies only what is its own: schema setup, its worker and its enqueue.
import { createInterface } from 'node:readline';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

// importPeer loads a package from the peer's cached install
// (BENCH_PEER_MODULES: the directory holding its package.json and
// node_modules, made by bench/run.sh from the committed package-lock.json).
export async function importPeer(name) {
  const dir = process.env.BENCH_PEER_MODULES;
  if (!dir) throw new Error('BENCH_PEER_MODULES is not set');
  const req = createRequire(join(dir, 'package.json'));
  return import(pathToFileURL(req.resolve(name)).href);
}

export const databaseURL = () => {
  const u = process.env.BENCH_DATABASE_URL;
  if (!u) throw new Error('BENCH_DATABASE_URL is not set');
  return u;
};

export const concurrency = () => {
  const n = Number(process.env.BENCH_CONCURRENCY);
  if (!Number.isInteger(n) || n < 1) throw new Error('BENCH_CONCURRENCY must be a positive integer');
  return n;
};

// Microseconds since the epoch, on the clock the producer's t_us comes from.
export const nowUS = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

// tally is what a worker counts: no-op jobs run, and the pickup latency of
// each latency job (handler start minus the producer's t_us).
export function newTally() {
  return { noop: 0, latency_us: [] };
}

// runWorker starts the worker, says "ready", and on SIGTERM stops it
// gracefully, prints the tally and exits.
export async function runWorker(start, tally) {
  const stop = await start();
  process.stdout.write('BENCH-READY\n');
  let stopping = false;
  const onSignal = async () => {
    if (stopping) return;
    stopping = true;
    try {
      await stop();
      process.stdout.write(`BENCH-RESULT ${JSON.stringify(tally)}\n`);
      process.exit(0);
    } catch (err) {
      process.stderr.write(`stop failed: ${err?.stack ?? err}\n`);
      process.exit(1);
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

// runClient connects the producer and serves the driver's commands, one a
// line on stdin, until stdin closes:
//   noop N              enqueue N no-op jobs with the peer's bulk enqueue,
//                       answer "committed <unix µs>" once it returned
//   latency RATE COUNT  enqueue COUNT latency jobs one at a time, RATE a
//                       second, each with {t_us} taken just before its
//                       enqueue call; answer "done"
export async function runClient({ connect, bulk, one, close }) {
  await connect();
  process.stdout.write('BENCH-READY\n');
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    const [cmd, ...args] = line.trim().split(/\s+/);
    if (cmd === 'noop') {
      await bulk(Number(args[0]));
      process.stdout.write(`committed ${nowUS()}\n`);
    } else if (cmd === 'latency') {
      const rate = Number(args[0]);
      const count = Number(args[1]);
      const begin = performance.now();
      for (let i = 0; i < count; i++) {
        const due = begin + (i * 1000) / rate;
        const wait = due - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        await one({ t_us: nowUS() });
      }
      process.stdout.write('done\n');
    } else if (cmd !== '') {
      throw new Error(`unknown command ${JSON.stringify(line)}`);
    }
  }
  await close();
}

// main dispatches on the mode in argv[2].
export async function main(modes) {
  const mode = process.argv[2];
  const fn = modes[mode];
  if (!fn) {
    process.stderr.write(`usage: peer.mjs ${Object.keys(modes).join('|')}\n`);
    process.exit(2);
  }
  try {
    await fn();
    // A worker runs until SIGTERM; setup and the client are done here.
    if (mode !== 'worker') process.exit(0);
  } catch (err) {
    process.stderr.write(`${mode} failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  }
}
