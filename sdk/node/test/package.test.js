'use strict';
// The package as people get it: `npm pack`, installed into a fresh project, its handlers
// (JS, ES module, TypeScript compiled with the package's types) driven over stdio frame by
// frame and over the unix transport as soniq-sidecar starts them. Nothing here loads the SDK
// from the repository: the project resolves `soniq-handler` from its own node_modules.
const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { Handler, ROOT } = require('./support/harness');
const { openSession } = require('./support/attach');

const REPO_PROTO = path.join(ROOT, '..', '..', 'protocol', 'handler.proto');
const FIXTURE = path.join(ROOT, 'test', 'support', 'consumer');
const PEERS = ['@grpc/grpc-js', '@grpc/proto-loader'];
const COOKIE = { SONIQ_PLUGIN_MAGIC_COOKIE: 'soniq-handler-v1' };

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-node-pkg-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const live = [];

// Every test kills the processes it started, pass or fail.
function test(name, fn) {
  nodeTest(name, async (t) => {
    try {
      await fn(t);
    } finally {
      while (live.length) live.pop().kill();
    }
  });
}

// npm as a user runs it: not with the variables of the `npm test` this file runs under.
function npm(args, cwd) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  const r = spawnSync('npm', args, { cwd, env, encoding: 'utf8' });
  assert.equal(r.status, 0, `npm ${args.join(' ')} failed:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

// The child's whole environment, as the sidecar gives it: the manifest's env (none here)
// and the SONIQ_* variables; nothing inherited from this process.
function sidecarEnv(transport, extra = {}) {
  const env = Object.fromEntries(Object.keys(process.env).map((k) => [k, undefined]));
  return {
    ...env,
    SONIQ_PROTOCOL_VERSIONS: '1',
    SONIQ_TRANSPORT: transport,
    SONIQ_HANDLER: 'pkg',
    SONIQ_MAX_FRAME_BYTES: String(16 * 1024 * 1024),
    ...extra,
  };
}

// The packed tarball and a project with it installed, built once for the whole file.
let built;
function project() {
  built ??= (() => {
    const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', tmp], ROOT));
    const dir = path.join(tmp, 'app');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'package.json'), `${JSON.stringify({ name: 'soniq-pkg-consumer', version: '1.0.0', private: true }, null, 2)}\n`);
    for (const f of fs.readdirSync(FIXTURE)) fs.copyFileSync(path.join(FIXTURE, f), path.join(dir, f));
    npm(['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(tmp, packed.filename)], dir);
    return { dir, packed, installed: path.join(dir, 'node_modules', 'soniq-handler') };
  })();
  return built;
}

function start(script, opts) {
  const h = new Handler(script, opts);
  live.push(h);
  return h;
}

test('proto/handler.proto in the package is protocol/handler.proto', () => {
  assert.equal(fs.readFileSync(path.join(ROOT, 'proto', 'handler.proto'), 'utf8'), fs.readFileSync(REPO_PROTO, 'utf8'));
});

test('the example image (examples/node/Dockerfile) copies every module of the package from sdk/node', () => {
  const dockerfile = path.join(ROOT, '..', '..', 'examples', 'node', 'Dockerfile');
  const copied = fs.readFileSync(dockerfile, 'utf8').split('\n')
    .filter((l) => l.startsWith('COPY ')).flatMap((l) => l.split(/\s+/).slice(1, -1));
  const modules = require('../package.json').files.filter((f) => f.endsWith('.js'));
  assert.deepEqual(modules.filter((f) => !copied.includes(`sdk/node/${f}`)), []);
});

test('the tarball holds the SDK, its types and the proto, and no tests', () => {
  const { packed, installed, dir } = project();
  const files = packed.files.map((f) => f.path).sort();
  assert.deepEqual(files, [
    'README.md', 'children.js', 'codec.js', 'exits.js', 'index.d.ts', 'index.js', 'jsontext.js', 'ledger.js', 'listen.js', 'log.js', 'outcomes.js', 'package.json',
    'probe.js', 'proto/handler.proto', 'protocol.d.ts', 'protocol.js', 'registry.js', 'results.js', 'runtime.js', 'session.js', 'stdio.js',
    'unix.js', 'version.js',
  ]);
  assert.equal(fs.readFileSync(path.join(installed, 'proto', 'handler.proto'), 'utf8'), fs.readFileSync(REPO_PROTO, 'utf8'));
  // The gRPC packages are optional peers: a plain install does not bring them.
  for (const p of PEERS) assert.equal(fs.existsSync(path.join(dir, 'node_modules', p)), false, `${p} installed`);
  const pkg = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8'));
  for (const p of PEERS) assert.equal(pkg.peerDependenciesMeta[p].optional, true);
  assert.deepEqual(Object.keys(pkg.dependencies ?? {}), []);
});

test('stdio: a JS handler in the project serves jobs from the installed package, without gRPC', async () => {
  const { dir, installed } = project();
  const h = start(path.join(dir, 'handler.js'), { cwd: dir, env: sidecarEnv('stdio') });
  const hello = await h.hello();
  assert.equal(hello.sdk, `soniq-node/${require('../package.json').version}`);
  assert.deepEqual(hello.jobs, [
    { name: 'pkg.add', cancellable: true },
    { name: 'pkg.ctx', cancellable: true },
    { name: 'pkg.wait', cancellable: true },
    { name: 'pkg.sync', cancellable: false },
    { name: 'pkg.snooze', cancellable: true },
    { name: 'pkg.permanent', cancellable: true },
  ]);
  assert.equal(hello.concurrency, 4);

  h.job('a1', 'pkg.add', { a: 2, b: 40 });
  assert.deepEqual((await h.result('a1')).result, { sum: 42 });

  h.job('c1', 'pkg.ctx', {}, {
    attempt: 2, max_attempts: 5, queue: 'q', deadline: Date.UTC(2030, 0, 1), traceparent: 'tp',
    worker_id: 'w-1', scheduled_at: Date.UTC(2029, 11, 31, 23, 59, 59, 999), created_at: Date.UTC(2029, 0, 1),
  });
  const { sdkFile, keys, ...ctx } = (await h.result('c1')).result;
  assert.equal(sdkFile, path.join(installed, 'index.js'));
  assert.equal(keys.length, 12); // with ctx.enqueue
  assert.deepEqual(ctx, {
    id: 'c1', name: 'pkg.ctx', attempt: 2, maxAttempts: 5, queue: 'q',
    deadline: '2030-01-01T00:00:00.000Z', traceparent: 'tp', workerId: 'w-1',
    scheduledAt: '2029-12-31T23:59:59.999Z', createdAt: '2029-01-01T00:00:00.000Z', aborted: false,
  });

  h.job('s1', 'pkg.snooze');
  const s = await h.result('s1');
  assert.deepEqual([s.status, s.seconds, s.reason], ['snooze', 5, 'later']);
  h.job('p1', 'pkg.permanent');
  const p = await h.result('p1');
  assert.deepEqual([p.status, p.error.type, p.error.retryable], ['failed', 'PermanentError', false]);

  // A cancel aborts ctx.signal with its reason; a sync job ignores it and finishes.
  h.job('w1', 'pkg.wait');
  h.job('y1', 'pkg.sync', { ms: 200 });
  await waitFor(() => h.stderr.includes('pkg.wait w1 started'), () => h.stderr);
  h.send({ type: 'cancel', id: 'w1', reason: 'job_timeout' });
  h.send({ type: 'cancel', id: 'y1', reason: 'shutdown_timeout' });
  assert.equal((await h.result('w1')).status, 'cancelled');
  assert.match(h.stderr, /pkg\.wait w1 aborted: job_timeout/);
  assert.deepEqual(await h.result('y1'), { type: 'result', id: 'y1', status: 'done', result: { slept: 200 }, error: null, seconds: null, reason: null });

  h.send({ type: 'shutdown' });
  assert.deepEqual(await h.exit(), { code: 0, signal: null });
});

test('stdio: an ES module imports the installed package by name', async () => {
  const { dir } = project();
  const h = start(path.join(dir, 'handler.mjs'), { cwd: dir, env: sidecarEnv('stdio') });
  assert.deepEqual((await h.hello()).jobs.map((j) => j.name), ['esm.add', 'esm.snooze']);
  h.job('e1', 'esm.add', { a: 1, b: 2 });
  assert.deepEqual((await h.result('e1')).result, { sum: 3 });
  h.send({ type: 'shutdown' });
  assert.equal((await h.exit()).code, 0);
});

test('stdio: a TypeScript handler compiles against the installed types and runs', async () => {
  const { dir } = project();
  // The project's tsconfig, with @types/node from this package's devDependencies (the
  // project has no node_modules/@types of its own).
  const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', dir,
    '--typeRoots', path.join(ROOT, 'node_modules', '@types')], { cwd: dir, encoding: 'utf8' });
  assert.equal(tsc.status, 0, `tsc failed:\n${tsc.stdout}${tsc.stderr}`);
  const h = start(path.join(dir, 'dist', 'handler.js'), { cwd: dir, env: sidecarEnv('stdio') });
  assert.deepEqual((await h.hello()).jobs, [{ name: 'ts.resize', cancellable: true }, { name: 'ts.render', cancellable: false }]);
  h.job('t1', 'ts.resize', { url: 'a.png', width: 10 }, { attempt: 2 });
  assert.deepEqual((await h.result('t1')).result, { url: 'a.png', width: 10, attempt: 2, deadline: null });
  h.job('t2', 'ts.resize', { url: 'busy:a.png', width: 10 });
  assert.equal((await h.result('t2')).status, 'snooze');
  h.job('t3', 'ts.resize', { url: 'a.png', width: 0 });
  assert.equal((await h.result('t3')).error.retryable, false);
  h.job('t4', 'ts.render', { pages: 3 });
  assert.deepEqual((await h.result('t4')).result, { pages: 3 });
  h.send({ type: 'shutdown' });
  assert.equal((await h.exit()).code, 0);
});

// ---------------------------------------------------------------------------------------
// The unix transport, started as the sidecar starts it (go-plugin's variables, stdin on
// /dev/null, a private socket directory) and called with the repository's handler.proto, the
// one the sidecar is built from.

class UnixHandler {
  constructor(script, cwd) {
    this.socketDir = fs.mkdtempSync(path.join(tmp, 'sock-'));
    const env = Object.fromEntries(Object.entries(sidecarEnv('unix', {
      ...COOKIE,
      PLUGIN_PROTOCOL_VERSIONS: '1',
      PLUGIN_MIN_PORT: '10000',
      PLUGIN_MAX_PORT: '25000',
      PLUGIN_UNIX_SOCKET_DIR: this.socketDir,
    })).filter(([, v]) => v !== undefined));
    this.child = spawn(process.execPath, [script], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.stdout = '';
    this.stderr = '';
    this.child.stdout.setEncoding('utf8').on('data', (s) => { this.stdout += s; });
    this.child.stderr.setEncoding('utf8').on('data', (s) => { this.stderr += s; });
    this.exited = new Promise((resolve) => {
      this.child.on('close', (code, signal) => {
        this.exitCode = code;
        resolve({ code, signal });
      });
    });
  }

  // The handshake line `1|1|unix|<socket>|grpc`, then a client on that socket.
  async connect() {
    await waitFor(() => this.stdout.includes('\n') || this.exitCode !== undefined, () => this.stderr);
    const m = /^1\|1\|unix\|(.+)\|grpc\n$/.exec(this.stdout);
    assert.ok(m, `handshake line: ${JSON.stringify(this.stdout)}; stderr:\n${this.stderr}`);
    this.socket = m[1];
    assert.equal(path.dirname(this.socket), this.socketDir);
    const def = protoLoader.loadSync(REPO_PROTO, { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: false });
    const { Handler: Service } = grpc.loadPackageDefinition(def).soniq.handler.v1;
    this.client = new Service(`unix:${this.socket}`, grpc.credentials.createInsecure());
  }

  raw(method, body) {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(method, (x) => x, (x) => x, body, (err, res) => (err ? reject(err) : resolve(res)));
    });
  }

  kill() {
    this.client?.close();
    if (this.exitCode === undefined) this.child.kill('SIGKILL');
  }
}

function startUnix(script, cwd) {
  const h = new UnixHandler(script, cwd);
  live.push(h);
  return h;
}

test('unix without @grpc/grpc-js and @grpc/proto-loader: one line says what to install, exit 1', async () => {
  const { dir } = project();
  const h = startUnix(path.join(dir, 'handler.js'), dir);
  assert.deepEqual(await h.exited, { code: 1, signal: null });
  assert.equal(h.stdout, '', 'no handshake');
  assert.match(h.stderr, /SONIQ_TRANSPORT=unix needs the packages @grpc\/grpc-js and @grpc\/proto-loader .*missing: @grpc\/grpc-js, @grpc\/proto-loader\. Install them in the handler's project: npm install @grpc\/grpc-js @grpc\/proto-loader\n$/);
  assert.equal(h.stderr.split('\n').length, 2, h.stderr);
});

test('--listen without the gRPC packages: one line says what to install, exit 1; the probe needs none', async () => {
  const { dir } = project();
  const sock = path.join(tmp, 'nogrpc.sock');
  const h = start(path.join(dir, 'handler.js'), { cwd: dir, env: sidecarEnv('stdio', { SONIQ_LISTEN: sock }) });
  assert.deepEqual(await h.exit(), { code: 1, signal: null });
  assert.match(h.stderr, /^soniq-handler\[\d+\]: --listen\/SONIQ_LISTEN needs the packages @grpc\/grpc-js and @grpc\/proto-loader .*npm install @grpc\/grpc-js @grpc\/proto-loader\n$/);
  assert.equal(fs.existsSync(sock), false);
  // The package's probe command, as a project runs it (node_modules/.bin), without gRPC.
  const probe = spawnSync(path.join(dir, 'node_modules', '.bin', 'soniq-handler-probe'), [sock], { encoding: 'utf8' });
  assert.equal(probe.status, 1);
  assert.equal(probe.stderr, `soniq-handler probe: ${sock} does not exist\n`);
});

test('unix: with the gRPC packages installed, the same handler serves the sidecar\'s Session', async () => {
  const { dir, installed } = project();
  // The versions this package is tested with (its lock file), from npm's cache when it can.
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8'));
  npm(['install', '--no-audit', '--no-fund', '--prefer-offline',
    ...PEERS.map((p) => `${p}@${lock.packages[`node_modules/${p}`].version}`)], dir);

  const h = startUnix(path.join(dir, 'handler.js'), dir);
  await h.connect();
  // The sidecar's ping: grpc.health.v1.Health/Check of service "plugin" is SERVING.
  const plugin = Buffer.concat([Buffer.from([0x0a, 6]), Buffer.from('plugin')]);
  assert.deepEqual(await h.raw('/grpc.health.v1.Health/Check', plugin), Buffer.from([0x08, 0x01]));

  const { c, hello } = await openSession(h.socket);
  assert.equal(hello.protocol, 1);
  assert.equal(hello.sdk, `soniq-node/${require('../package.json').version}`);
  assert.deepEqual(hello.jobs.map((j) => [j.name, j.cancellable]), [
    ['pkg.add', true], ['pkg.ctx', true], ['pkg.wait', true], ['pkg.sync', false], ['pkg.snooze', true], ['pkg.permanent', true],
  ]);
  const run = async (id, name, args) => {
    c.job(id, name, args);
    const r = await c.result();
    assert.equal(r.id, id);
    return r;
  };
  const add = await run('a1', 'pkg.add', { a: 2, b: 40 });
  assert.deepEqual([add.id, add.status, JSON.parse(add.result_json)], ['a1', 'DONE', { sum: 42 }]);
  const ctx = JSON.parse((await run('c1', 'pkg.ctx')).result_json);
  assert.equal(ctx.sdkFile, path.join(installed, 'index.js'));
  const snooze = await run('s1', 'pkg.snooze');
  assert.deepEqual([snooze.status, snooze.seconds, snooze.reason], ['SNOOZE', 5, 'later']);
  const perm = await run('p1', 'pkg.permanent');
  assert.deepEqual([perm.status, perm.error.type, perm.error.retryable], ['FAILED', 'PermanentError', false]);
  const sync = await run('y1', 'pkg.sync', { ms: 20 });
  assert.deepEqual(JSON.parse(sync.result_json), { slept: 20 });

  // A cancel on the stream: ctx.signal aborts with the reason, the result is `cancelled`.
  c.job('w1', 'pkg.wait');
  await waitFor(() => h.stderr.includes('pkg.wait w1 started'), () => h.stderr);
  c.send({ cancel: { id: 'w1', reason: 'job_timeout' } });
  const cancelled = await c.result();
  assert.deepEqual([cancelled.id, cancelled.status], ['w1', 'CANCELLED']);
  await waitFor(() => h.stderr.includes('pkg.wait w1 aborted: job_timeout'), () => h.stderr);

  // The end of the session ends a spawned process: exit 0, socket removed.
  c.send({ shutdown: {} });
  assert.equal((await c.ended()).code, grpc.status.OK);
  c.close();
  assert.deepEqual(await h.exited, { code: 0, signal: null });
  assert.equal(fs.existsSync(h.socket), false, 'socket removed');
  assert.equal(h.stdout.split('\n').length, 2, `nothing on stdout after the handshake: ${JSON.stringify(h.stdout)}`);
});

test('unix: go-plugin\'s Shutdown stops an idle spawned process', async () => {
  const { dir } = project(); // the gRPC packages were installed by the test above
  const h = startUnix(path.join(dir, 'handler.js'), dir);
  await h.connect();
  // go-plugin's Shutdown: the process exits 0 and removes its socket.
  await h.raw('/plugin.GRPCController/Shutdown', Buffer.alloc(0));
  assert.deepEqual(await h.exited, { code: 0, signal: null });
  assert.equal(fs.existsSync(h.socket), false, 'socket removed');
  assert.equal(h.stdout.split('\n').length, 2, `nothing on stdout after the handshake: ${JSON.stringify(h.stdout)}`);
});

test('--listen with the gRPC packages installed: the project handler serves a Session; the bin probes it', async () => {
  const { dir } = project(); // the gRPC packages were installed by the test above
  assert.ok(fs.existsSync(path.join(dir, 'node_modules', '@grpc', 'grpc-js')), 'runs after the unix test installed the peers');
  const sock = path.join(tmp, 'pkg.sock');
  const child = spawn(process.execPath, [path.join(dir, 'handler.js'), '--listen', sock], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  live.push({ kill: () => child.kill('SIGKILL') });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s) => { stderr += s; });
  await waitFor(() => stderr.includes('listening on'), () => stderr);
  assert.equal((fs.statSync(sock).mode & 0o777), 0o660);
  const probe = spawnSync(path.join(dir, 'node_modules', '.bin', 'soniq-handler-probe'), [sock], { encoding: 'utf8' });
  assert.deepEqual([probe.status, probe.stderr], [0, '']);
  const { c, hello } = await openSession(sock);
  try {
    assert.deepEqual(hello.jobs.map((j) => j.name), ['pkg.add', 'pkg.ctx', 'pkg.wait', 'pkg.sync', 'pkg.snooze', 'pkg.permanent']);
    c.job('a1', 'pkg.add', { a: 2, b: 40 });
    assert.deepEqual(JSON.parse((await c.result()).result_json), { sum: 42 });
  } finally {
    c.close();
  }
  const exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.equal(fs.existsSync(sock), false);
});

// Polls `cond` (cheap, in-memory) until it holds; fails after 10 s with `detail()`.
async function waitFor(cond, detail, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms:\n${detail()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
