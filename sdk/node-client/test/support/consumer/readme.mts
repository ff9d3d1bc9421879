// The example of README.md, compiled by test/types.test.js (which checks it is the README's).
import { Client } from 'soniq-client';
import pg from 'pg';
const soniq = new Client({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
const id = await soniq.enqueue('emails.send', { to: 'ada@example.com' }, { queue: 'emails', delay: 5000 });
console.log('queued', id, (await soniq.getJob(id))?.status);
