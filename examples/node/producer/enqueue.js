#!/usr/bin/env node
'use strict';
// Enqueue a job from Node with soniq-client, as a web application does:
//
//   node enqueue.js examples.add '{"a": 1, "b": 2}' [--queue Q] [--priority N] [--delay MS]
//                  [--max-attempts N] [--dedup-key K] [--unique]
//
// The database is SONIQ_DATABASE_URL (postgres://… or sqlite:PATH), else sqlite:soniq.db, as
// for soniq-sidecar. SQLite needs better-sqlite3 installed beside soniq-client
// (npm install better-sqlite3@12). Prints the job's id (the queued duplicate's on a hit).
const { Client } = require('soniq-client');

function parse(argv) {
  const [name, args, ...rest] = argv;
  if (!name) throw new Error('usage: node enqueue.js NAME [ARGS_JSON] [--queue Q] [--priority N] [--delay MS] [--max-attempts N] [--dedup-key K] [--unique]');
  const options = {};
  const flags = { '--queue': ['queue', String], '--priority': ['priority', Number], '--delay': ['delay', Number],
    '--max-attempts': ['maxAttempts', Number], '--dedup-key': ['dedupKey', String] };
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === '--unique') options.unique = true;
    else if (flags[rest[i]] && i + 1 < rest.length) options[flags[rest[i]][0]] = flags[rest[i]][1](rest[++i]);
    else throw new Error(`unknown argument ${rest[i]}`);
  }
  return { name, args: args ? JSON.parse(args) : {}, options };
}

async function main() {
  const { name, args, options } = parse(process.argv.slice(2));
  const soniq = new Client({ connectionString: process.env.SONIQ_DATABASE_URL || 'sqlite:soniq.db' });
  try {
    console.log(await soniq.enqueue(name, args, options));
  } finally {
    await soniq.close();
  }
}

main().catch((err) => {
  console.error(`enqueue: ${err.message}`);
  process.exit(1);
});
