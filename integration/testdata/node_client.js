'use strict';
// Drives soniq-client for node_client_test.go, as the application of examples/node/producer
// has it installed (soniq-client linked to sdk/node-client, and pg: make deps-node).
// Usage: node node_client.js COMMAND DATABASE_URL [JSON_ARGS]; prints one JSON document.
const path = require('node:path');
const { createRequire } = require('node:module');

const app = createRequire(path.join(__dirname, '..', '..', 'examples', 'node', 'producer', 'package.json'));
const { Client } = app('soniq-client');
const pg = app('pg');

async function main() {
  const [command, url, raw] = process.argv.slice(2);
  const args = raw ? JSON.parse(raw) : {};
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const soniq = new Client({ pool });
  try {
    switch (command) {
      case 'transactions': {
        // One job in a transaction that rolls back, one in a transaction that commits, both
        // beside a row of the application's own.
        const c = await pool.connect();
        try {
          await c.query('BEGIN');
          const rolledBack = await soniq.enqueue(args.name, { n: 'rolled back' }, { db: c });
          await c.query('ROLLBACK');
          await c.query('BEGIN');
          const committed = await soniq.enqueue(args.name, { n: 'committed' }, { db: c });
          await c.query('COMMIT');
          return { rolled_back: rolledBack, committed };
        } finally {
          c.release();
        }
      }
      case 'enqueue':
        return { id: await soniq.enqueue(args.name, args.args, args.options) };
      case 'cancel':
        return await soniq.cancel(args.id, { wait: args.wait });
      default:
        throw new Error(`unknown command ${command}`);
    }
  } finally {
    await soniq.close();
    await pool.end();
  }
}

main().then((out) => process.stdout.write(JSON.stringify(out) + '\n'), (err) => {
  process.stderr.write(`${err.stack}\n`);
  process.exit(1);
});
