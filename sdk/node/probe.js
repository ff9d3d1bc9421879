#!/usr/bin/env node
'use strict';
// soniq-handler-probe PATH [--timeout SECONDS]: exits 0 when the handler serving the Unix
// socket at PATH (attach mode, --listen) answers the gRPC health check of service "plugin"
// SERVING; otherwise 1 with a one-line reason on stderr (2: bad usage). For Kubernetes exec
// probes. One gRPC call made with node:http2, so it needs no package and starts fast.

const http2 = require('node:http2');
const net = require('node:net');
const fs = require('node:fs');

const SERVICE = 'plugin';
const STATUS = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];
const USAGE = 'usage: soniq-handler-probe PATH [--timeout SECONDS]\n';

// The HealthCheckResponse's status, read from a gRPC message body (field 1, a varint).
function servingStatus(msg) {
  let status = 0;
  let i = 0;
  while (i < msg.length) {
    const tag = msg[i++];
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = msg[i++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80 || i >= msg.length) break;
    }
    if (tag === 0x08) status = v;
    else if ((tag & 7) === 2) i += v;
    else if ((tag & 7) !== 0) break;
  }
  return STATUS[status] ?? `status ${status}`;
}

// Resolves with the service's status name; rejects with an Error saying what went wrong.
function check(socketPath, timeoutMs) {
  return new Promise((resolve, reject) => {
    let client = null;
    const socket = net.connect({ path: socketPath });
    const done = (err, value) => {
      clearTimeout(timer);
      client?.destroy();
      socket.destroy();
      if (err) reject(err);
      else resolve(value);
    };
    const timer = setTimeout(() => done(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
    socket.on('error', (err) => done(new Error(`cannot connect: ${err.code || err.message}`)));
    socket.on('connect', () => {
      client = http2.connect('http://localhost', { createConnection: () => socket });
      client.on('error', (err) => done(new Error(`health check failed: ${err.code || err.message}`)));
      request(client, done);
    });
  });
}

// One Health/Check call on the connection; done(err, statusName).
function request(client, done) {
  const req = client.request({
    ':method': 'POST', ':path': '/grpc.health.v1.Health/Check', 'content-type': 'application/grpc', te: 'trailers',
  });
  const chunks = [];
  let grpcStatus = null;
  let grpcMessage = '';
  const noteStatus = (headers) => {
    if (headers['grpc-status'] !== undefined) {
      grpcStatus = Number(headers['grpc-status']);
      grpcMessage = decodeURIComponent(String(headers['grpc-message'] ?? ''));
    }
  };
  req.on('response', noteStatus); // a trailers-only answer carries the status here
  req.on('trailers', noteStatus);
  req.on('data', (c) => chunks.push(c));
  req.on('error', (err) => done(new Error(`health check failed: ${err.code || err.message}`)));
  req.on('end', () => {
    if (grpcStatus === null) return done(new Error('health check failed: no gRPC status'));
    if (grpcStatus !== 0) return done(new Error(`health check failed: gRPC status ${grpcStatus}: ${grpcMessage}`));
    const body = Buffer.concat(chunks);
    if (body.length < 5) return done(new Error('health check failed: empty answer'));
    done(null, servingStatus(body.subarray(5, 5 + body.readUInt32BE(1))));
  });
  const msg = Buffer.concat([Buffer.from([0x0a, SERVICE.length]), Buffer.from(SERVICE)]);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  req.end(Buffer.concat([head, msg]));
}

async function main(argv) {
  let timeout = 3;
  if (argv.length === 3 && argv[1] === '--timeout') timeout = Number(argv[2]);
  if ((argv.length !== 1 && argv.length !== 3) || argv[0].startsWith('-') || !(timeout > 0)) {
    process.stderr.write(USAGE);
    return 2;
  }
  const socketPath = argv[0];
  let reason = null;
  if (!fs.existsSync(socketPath)) {
    reason = `${socketPath} does not exist`;
  } else {
    try {
      const status = await check(socketPath, timeout * 1000);
      if (status !== 'SERVING') reason = `${socketPath}: service '${SERVICE}' is ${status}`;
    } catch (err) {
      reason = `${socketPath}: ${err.message}`;
    }
  }
  if (reason === null) return 0;
  process.stderr.write(`soniq-handler probe: ${reason}\n`);
  return 1;
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code; });
