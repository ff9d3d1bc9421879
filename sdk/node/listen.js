'use strict';
// Attach mode: `--listen PATH` on the command line (or $SONIQ_LISTEN). The process serves the
// Session stream (session.js) and the gRPC health service on a Unix socket of its own, which
// a sidecar in another container attaches to, one session at a time; it lives across
// sessions and drains on SIGTERM. See docs/protocol.md, "The Session stream and attach mode".
//
// Like the unix transport it needs the optional peers @grpc/grpc-js and @grpc/proto-loader.

const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { SessionCore, sessionService, ACK_WAIT_MS } = require('./session');
const { requirePeer, decodeHealthRequest, unaryDef, tracer, PROTO_PATH } = require('./unix');
const { log } = require('./log');
const { EXIT_OK, EXIT_USAGE } = require('./exits');

// The service name the sidecar checks, and the server as a whole.
const HEALTH_SERVICES = ['plugin', ''];
// Group read/write, nothing for others: a sidecar container of another user that shares the
// volume's group (Kubernetes fsGroup) can connect; nobody else.
const SOCKET_MODE = 0o660;
// How long an exiting handler lets its last messages go out.
const STOP_GRACE_MS = 2000;
// HealthCheckResponse{status}, by hand like the request (unix.js).
const HEALTH = { SERVING: Buffer.from([0x08, 0x01]), NOT_SERVING: Buffer.from([0x08, 0x02]) };

function fail(text) {
  log(text);
  process.exit(EXIT_USAGE);
}

// The socket path of attach mode: `--listen PATH` or `--listen=PATH` among the arguments,
// else $SONIQ_LISTEN; null for a handler the sidecar spawns. Throws for a --listen without
// a path.
function listenPath(argv, env) {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--listen' || arg === '--listen=') {
      const p = arg === '--listen' ? argv[i + 1] : '';
      if (!p) throw new Error('--listen needs a socket path');
      return p;
    }
    if (arg.startsWith('--listen=')) return arg.slice('--listen='.length);
  }
  return env.SONIQ_LISTEN || null;
}

// Whether something answers on the Unix socket at p: true, false (refused: a stale file), or
// an Error saying why it cannot tell.
function answers(p) {
  return new Promise((resolve) => {
    const c = net.connect({ path: p });
    const done = (v) => {
      c.destroy();
      resolve(v);
    };
    c.setTimeout(2000, () => done(new Error('no answer within 2 s')));
    c.on('connect', () => done(true));
    c.on('error', (err) => done(err.code === 'ECONNREFUSED' || err.code === 'ENOENT' ? false : err));
  });
}

// The path is usable: its directory exists, and nothing lives there but, at most, a stale
// socket (removed). Exits 2 otherwise.
async function checkPath(p) {
  const parent = path.dirname(path.resolve(p));
  let st;
  try {
    if (!fs.statSync(parent).isDirectory()) fail(`--listen ${p}: ${parent} is not a directory`);
  } catch {
    fail(`--listen ${p}: directory ${parent} does not exist`);
  }
  try {
    st = fs.lstatSync(p);
  } catch (err) {
    if (err.code === 'ENOENT') return;
    fail(`--listen ${p}: cannot inspect the path: ${err.message}`);
  }
  if (!st.isSocket()) fail(`--listen ${p}: the path exists and is not a socket; not replacing it`);
  const live = await answers(p);
  if (live === true) fail(`--listen ${p}: another process is serving on this socket`);
  if (live instanceof Error) fail(`--listen ${p}: cannot tell whether the socket is in use: ${live.message}`);
  log(`removing stale socket ${p} (nobody answers on it)`);
  try {
    fs.unlinkSync(p);
  } catch (err) {
    if (err.code !== 'ENOENT') fail(`--listen ${p}: cannot remove the stale socket: ${err.message}`);
  }
}

// Serves sessions on the socket at socketPath until SIGTERM (or SIGINT) and then until no job is
// held; then exits the process 0.
async function serve(rt, protocolVersion, socketPath) {
  const what = '--listen/SONIQ_LISTEN';
  const grpc = requirePeer('@grpc/grpc-js', what);
  const protoLoader = requirePeer('@grpc/proto-loader', what);
  await checkPath(socketPath);

  let server = null;
  let exiting = false;
  let ackWait = null; // the bounded wait for the last acknowledgements
  const health = new Map(HEALTH_SERVICES.map((name) => [name, 'SERVING']));
  const core = new SessionCore(rt, protocolVersion, grpc, {
    attach: true,
    trace: tracer(process.env.HANDLER_TRACE_FRAMES),
    onChange: () => maybeExit(),
  });

  // Told to stop and nothing held: end the session, let the last messages go out, exit 0.
  function maybeExit() {
    if (!core.draining || !rt.idle || exiting) return;
    // The last results are acknowledged once the sidecar has written them; a short wait, so
    // that none is left to a session that ends.
    if (core.awaitingAcks() && ackWait !== 'over') {
      if (ackWait === null) {
        ackWait = setTimeout(() => {
          ackWait = 'over';
          maybeExit();
        }, ACK_WAIT_MS);
      }
      return;
    }
    if (ackWait !== null && ackWait !== 'over') clearTimeout(ackWait);
    exiting = true;
    for (const id of core.lostResults()) log(`WARN: exiting with the result of job ${id} undelivered (no session was open)`);
    core.endCurrent();
    const force = setTimeout(() => {
      server.forceShutdown();
      process.exit(EXIT_OK);
    }, STOP_GRACE_MS);
    server.tryShutdown(() => {
      clearTimeout(force);
      process.exit(EXIT_OK);
    });
  }

  const limit = rt.maxFrameBytes + 64 * 1024; // a frame's worth of payload plus the envelope
  server = new grpc.Server({ 'grpc.max_receive_message_length': limit, 'grpc.max_send_message_length': limit });
  server.addService(sessionService(grpc, protoLoader, PROTO_PATH), { Session: (call) => core.handle(call) });
  server.addService({
    Check: unaryDef('/grpc.health.v1.Health/Check', decodeHealthRequest, (x) => x),
  }, {
    Check(call, callback) {
      const st = health.get(call.request.service);
      if (st) callback(null, HEALTH[st]);
      else callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${call.request.service}` });
    },
  });

  // The socket is 0660 from its creation on: grpc-js binds and starts accepting in one step
  // (bindAsync), so there is no moment between bind and serve to chmod in; the umask is what
  // makes the file 0660 as bind creates it, never open to others even briefly. The umask is
  // process-wide, but no job runs yet. The chmod then makes the mode exact.
  const oldMask = process.umask(0o117);
  let bound = false;
  await new Promise((resolve) => {
    server.bindAsync(`unix:${socketPath}`, grpc.ServerCredentials.createInsecure(), (err) => {
      process.umask(oldMask);
      if (err) fail(`--listen ${socketPath}: cannot listen: ${err.message}`);
      resolve();
    });
  });
  bound = true;
  process.on('exit', () => {
    if (!bound) return;
    try { fs.unlinkSync(socketPath); } catch { /* removed by the server's close */ }
  });
  try {
    fs.chmodSync(socketPath, SOCKET_MODE);
  } catch (err) {
    fail(`--listen ${socketPath}: cannot set the socket's mode: ${err.message}`);
  }
  // Before the line that tells the world it listens: from then on a SIGTERM must drain, not
  // kill (the default until a handler is installed).
  const stop = (signal) => {
    if (core.draining) return;
    log(`${signal}: draining (no new job; exiting once the ${rt.count} job(s) held have ended)`);
    // NOT_SERVING before anything else: probes and sidecars see it at once.
    for (const name of HEALTH_SERVICES) health.set(name, 'NOT_SERVING');
    core.beginDraining();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  log(`listening on unix socket ${socketPath} (attach mode: one session at a time; SIGTERM drains and exits)`);
}

module.exports = { serve, listenPath, HEALTH_SERVICES, SOCKET_MODE };
