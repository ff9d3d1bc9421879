'use strict';
// The Node SDK alone, for profiling: the bench's no-op handler (bench/handlers/node_handler.js)
// fed N no-op jobs, never more in flight than its concurrency, over stdio (frames on a pipe, as
// the bench's "SDK alone" row feeds it) or over the Session stream of the unix transport (Jobs
// messages as the sidecar batches them), with no sidecar and no database. It prints the
// handler's CPU (user + system, from /proc) per job and per 10,000 jobs; the driver's own CPU is
// not counted. Extra flags for the handler's node (--cpu-prof, --trace-gc) go in NODE_FLAGS.
// The machine's load moves these figures: compare two SDKs in alternating runs.
//
//   node bench/node-alone.js stdio|session [N=100000] [CONCURRENCY=32]
//   NODE_FLAGS='--cpu-prof --cpu-prof-dir=/tmp/prof' node bench/node-alone.js stdio
//
// The Session mode needs the SDK's dev dependencies (@grpc/grpc-js, @grpc/proto-loader) in
// sdk/node/node_modules (`make deps-node`).

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const root = path.join(__dirname, '..');
// NODE_SDK: another copy of sdk/node to measure (an older commit's, say).
const sdk = process.env.NODE_SDK || path.join(root, 'sdk', 'node');
const mode = process.argv[2];
const n = Number(process.argv[3] || 100000);
const conc = Number(process.argv[4] || 32);
if (mode !== 'stdio' && mode !== 'session') {
  process.stderr.write('usage: node bench/node-alone.js stdio|session [N] [CONCURRENCY]\n');
  process.exit(2);
}

// The process's CPU seconds so far (utime + stime, in clock ticks of 1/100 s on Linux).
function cpu(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

// The same, split: [user, system].
function cpuSplit(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return [Number(f[11]) / 100, Number(f[12]) / 100];
}

const flags = (process.env.NODE_FLAGS || '').split(' ').filter(Boolean);
const child = spawn(process.execPath, [...flags, path.join(root, 'bench', 'handlers', 'node_handler.js')], {
  env: {
    PATH: process.env.PATH,
    BENCH_NODE_SDK: path.join(sdk, 'index.js'),
    BENCH_CONCURRENCY: String(conc),
    SONIQ_PROTOCOL_VERSIONS: '1',
    SONIQ_TRANSPORT: mode === 'stdio' ? 'stdio' : 'unix',
    SONIQ_PLUGIN_MAGIC_COOKIE: 'soniq-handler-v1',
    PLUGIN_PROTOCOL_VERSIONS: '1',
  },
  stdio: ['pipe', 'pipe', 'inherit'],
});

const id = (i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
let sent = 0;
let done = 0;
let cpu0 = 0;
let t0 = 0;

function report() {
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = cpu(child.pid) - cpu0;
  const [user, sys] = cpuSplit(child.pid);
  process.stdout.write(`${mode} n=${n} handler_cpu_s=${c.toFixed(2)} us_per_job=${(c / n * 1e6).toFixed(1)} cpu_s_per_10k=${(c / n * 1e4).toFixed(3)} wall_s=${secs.toFixed(2)} jobs_per_s=${Math.round(n / secs)} (process total: user ${user.toFixed(2)} s, system ${sys.toFixed(2)} s)\n`);
}

child.on('exit', (code, signal) => {
  if (done < n) {
    process.stderr.write(`handler exited (${code ?? signal}) after ${done} results\n`);
    process.exit(1);
  }
});

if (mode === 'stdio') {
  // SIDECAR_FIELDS=1: the fields the sidecar adds to a claimed row's frame (worker_id,
  // scheduled_at, created_at), which the bench's SDK-alone row leaves out.
  const extra = process.env.SIDECAR_FIELDS === '1'
    ? `,"worker_id":"5c1d2e3f-0000-4000-8000-000000000001","scheduled_at":${Date.now()},"created_at":${Date.now()}` : '';
  const frame = (i) => `{"type":"job","id":"${id(i)}","name":"bench.noop","args":{},"attempt":1,"max_attempts":3,"queue":"default"${extra}}\n`;
  const more = (k) => {
    let text = '';
    for (; k > 0 && sent < n; k--) text += frame(sent++);
    if (text) child.stdin.write(text);
  };
  let hello = false;
  const lines = readline.createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    if (!hello) {
      hello = true;
      cpu0 = cpu(child.pid);
      t0 = process.hrtime.bigint();
      more(conc);
      return;
    }
    if (!line.includes('"status":"done"')) throw new Error(`not done: ${line}`);
    done++;
    pending++;
    if (!scheduled) {
      scheduled = true;
      setImmediate(flushMore);
    }
  });
  // The results of one read free their slots together, and their jobs go out in one write, as the
  // bench's Go driver writes what it has buffered when the window is full.
  let pending = 0;
  let scheduled = false;
  const flushMore = () => {
    scheduled = false;
    const k = pending;
    pending = 0;
    if (done === n) {
      report();
      child.stdin.end();
      return;
    }
    more(k);
  };
} else {
  const grpc = require(path.join(sdk, 'node_modules', '@grpc', 'grpc-js'));
  const protoLoader = require(path.join(sdk, 'node_modules', '@grpc', 'proto-loader'));
  const def = protoLoader.loadSync(path.join(sdk, 'proto', 'handler.proto'), { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  const Handler = grpc.loadPackageDefinition(def).soniq.handler.v1.Handler;
  const lines = readline.createInterface({ input: child.stdout });
  let socket = null;
  lines.on('line', (line) => {
    // go-plugin's handshake line (other lines: --trace-gc's, say).
    if (socket !== null || !/^1\|1\|unix\|/.test(line)) {
      process.stderr.write(`${line}\n`);
      return;
    }
    socket = line.split('|')[3];
    const client = new Handler(`unix:${socket}`, grpc.credentials.createInsecure());
    const call = client.Session();
    const job = (i) => ({ id: id(i), name: 'bench.noop', args_json: '{}', attempt: 1, max_attempts: 3, queue: 'default' });
    const more = (k) => {
      const jobs = [];
      for (; k > 0 && sent < n; k--) jobs.push(job(sent++));
      if (jobs.length) call.write({ jobs: { jobs } });
    };
    call.on('data', (m) => {
      if (m.message === 'hello') {
        call.write({ jobs: { jobs: [] } }); // the sidecar takes Results
        cpu0 = cpu(child.pid);
        t0 = process.hrtime.bigint();
        more(conc);
        return;
      }
      const rs = m.message === 'results' ? m.results.results : [m.result];
      for (const r of rs) if (r.status !== 'DONE') throw new Error(`not done: ${JSON.stringify(r)}`);
      done += rs.length;
      if (done === n) {
        report();
        call.end();
        return;
      }
      more(rs.length);
    });
    call.on('error', (err) => {
      if (done < n) throw err;
    });
  });
}
