'use strict';
// The unix transport: the same App served over gRPC on a Unix socket (docs/protocol.md,
// "The unix transport (gRPC)"). soniq-sidecar starts the process through hashicorp/go-plugin
// with SONIQ_TRANSPORT=unix; the process serves the Handler service of protocol/handler.proto
// (proto/handler.proto in this package, loaded at run time: its Session stream carries every v1
// message), the standard gRPC health service (service "plugin" SERVING) and go-plugin's
// plugin.GRPCController (Shutdown: finish what it holds, exit 0), then prints go-plugin's
// handshake line `1|<protocol>|unix|<socket path>|grpc`.
//
// Required only in that mode: @grpc/grpc-js and @grpc/proto-loader are optional peer
// dependencies, not needed for stdio.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { SessionCore, sessionService } = require('./session');
const { log } = require('./log');
const { EXIT_CANNOT_START, EXIT_NO_COMMON_PROTOCOL, EXIT_OK } = require('./exits');

const MAGIC_COOKIE_KEY = 'SONIQ_PLUGIN_MAGIC_COOKIE';
const MAGIC_COOKIE_VALUE = 'soniq-handler-v1';
const CORE_PROTOCOL_VERSION = 1; // go-plugin's own protocol
// The package ships its own copy of protocol/handler.proto (test/package.test.js keeps the
// two equal), so an installed package needs nothing from the repository.
const PROTO_PATH = process.env.SONIQ_HANDLER_PROTO || path.join(__dirname, 'proto', 'handler.proto');

// The health service's two messages, by hand (one string field in, one enum field out), so
// no health proto file or extra package is needed.
function decodeHealthRequest(buf) {
  let service = '';
  let i = 0;
  while (i < buf.length) {
    const tag = buf[i++];
    let len = 0;
    let shift = 0;
    for (;;) {
      const b = buf[i++];
      len += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80 || i >= buf.length) break;
    }
    if (tag === 0x0a) service = buf.subarray(i, i + len).toString('utf8');
    if ((tag & 7) === 2) i += len; // skip other length-delimited fields
    else if ((tag & 7) !== 0) break; // nothing else is expected
  }
  return { service };
}
const SERVING = Buffer.from([0x08, 0x01]); // HealthCheckResponse{status: SERVING}

function unaryDef(pathName, deserialize, serialize) {
  return {
    path: pathName,
    requestStream: false,
    responseStream: false,
    requestDeserialize: deserialize,
    responseSerialize: serialize,
    requestSerialize: (x) => x,
    responseDeserialize: (x) => x,
  };
}

// $HANDLER_TRACE_FRAMES: a debugging aid for this transport, which has no frame stream to tap.
// Each message from the sidecar is appended to that file as the stdio frame it stands for,
// "> " first (the format of a recorder between sidecar and handler on stdio).
function tracer(file) {
  if (!file) return () => {};
  const fd = fs.openSync(file, 'a');
  return (frame) => fs.writeSync(fd, `> ${JSON.stringify(frame)}\n`);
}

const PEERS = ['@grpc/grpc-js', '@grpc/proto-loader'];

// Loads one of the optional peer dependencies, or exits 1 with a line saying what to install
// (the sidecar shows the child's stderr in its log).
function requirePeer(name, what = 'SONIQ_TRANSPORT=unix') {
  try {
    return require(name);
  } catch (err) {
    const missing = PEERS.filter((p) => {
      try {
        require.resolve(p);
        return false;
      } catch {
        return true;
      }
    });
    if (err.code === 'MODULE_NOT_FOUND' && missing.length > 0) {
      log(`${what} needs the packages ${PEERS.join(' and ')} (optional peer dependencies of soniq-handler, not needed for stdio); missing: ${missing.join(', ')}. Install them in the handler's project: npm install ${PEERS.join(' ')}`);
    } else {
      log(`${what}: cannot load ${name}: ${String(err.message).split('\n')[0]}`);
    }
    process.exit(EXIT_CANNOT_START);
  }
}

// Serves the Runtime over gRPC until the sidecar shuts it down (the session ends, or
// GRPCController.Shutdown), then exits the process 0.
function serve(rt, protocolVersion, guard) {
  if (process.env[MAGIC_COOKIE_KEY] !== MAGIC_COOKIE_VALUE) {
    log(`SONIQ_TRANSPORT=unix: this process is a go-plugin handler and must be started by soniq-sidecar (${MAGIC_COOKIE_KEY} is not set as expected)`);
    process.exit(EXIT_CANNOT_START);
  }
  const offered = (process.env.PLUGIN_PROTOCOL_VERSIONS ?? String(protocolVersion)).split(',').map((s) => s.trim());
  if (!offered.includes(String(protocolVersion))) {
    log(`go-plugin offers app protocol versions ${JSON.stringify(offered.join(','))}; this SDK speaks ${protocolVersion}`);
    process.exit(EXIT_NO_COMMON_PROTOCOL);
  }
  const grpc = requirePeer('@grpc/grpc-js');
  const protoLoader = requirePeer('@grpc/proto-loader');

  let ownDir = null;
  let dir = process.env.PLUGIN_UNIX_SOCKET_DIR;
  if (!dir) ownDir = dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soniq-handler-')); // mode 0700
  const socket = path.join(dir, `handler-${process.pid}.sock`);
  const cleanup = () => {
    try { fs.unlinkSync(socket); } catch { /* gone already */ }
    if (ownDir) fs.rmSync(ownDir, { recursive: true, force: true });
  };
  process.on('exit', cleanup);

  const trace = tracer(process.env.HANDLER_TRACE_FRAMES);
  let draining = false;
  let server = null;

  // The Session stream carries every message; its end ends the process, as EOF on stdin does
  // on stdio.
  const core = new SessionCore(rt, protocolVersion, grpc, {
    attach: false,
    trace,
    onChange: () => {
      if (core.sessionEnded) draining = true;
      maybeExit();
    },
  });

  const maybeExit = () => {
    if (!draining || !rt.idle) return;
    // Let the last messages (and the Shutdown reply) go out, then exit 0.
    server.tryShutdown(() => process.exit(EXIT_OK));
  };

  const handler = {
    Session(call) {
      core.handle(call);
    },
  };

  const limit = rt.maxFrameBytes + 64 * 1024; // a frame's worth of payload plus the envelope
  server = new grpc.Server({ 'grpc.max_receive_message_length': limit, 'grpc.max_send_message_length': limit });
  // Session's own definition (64-bit integers as strings).
  const service = sessionService(grpc, protoLoader, PROTO_PATH);
  server.addService(service, handler);
  server.addService({
    Check: unaryDef('/grpc.health.v1.Health/Check', decodeHealthRequest, (x) => x),
  }, {
    Check(call, callback) {
      if (call.request.service === 'plugin' || call.request.service === '') callback(null, SERVING);
      else callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${call.request.service}` });
    },
  });
  server.addService({
    Shutdown: unaryDef('/plugin.GRPCController/Shutdown', (x) => x, (x) => x),
  }, {
    Shutdown(call, callback) {
      draining = true;
      callback(null, Buffer.alloc(0));
      setImmediate(maybeExit);
    },
  });
  server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) {
      log(`cannot listen on ${socket}: ${err.message}`);
      process.exit(EXIT_CANNOT_START);
    }
    guard.write(`${CORE_PROTOCOL_VERSION}|${protocolVersion}|unix|${socket}|grpc\n`);
  });
}

module.exports = { serve, requirePeer, decodeHealthRequest, unaryDef, tracer, PROTO_PATH };
