'use strict';
// cancel(id): what `soniq-sidecar cancel ID` does, with its answers. A queued job is cancelled
// at once; for a running one a request is recorded in the sidecar's own table and the sidecar
// holding the job is notified (docs/cancel.md), then the row is read every 100 ms until it is
// cancelled, the holder refuses (a sync job), the job ends otherwise, or `wait` passes.

const POLL_MS = 100;

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function holderOf(job) {
  return job && job.workerId ? `worker ${job.workerId}` : 'an unknown worker';
}

function answer(outcome, job, message, extra = {}) {
  const cancelled = outcome === 'cancelled_queued' || outcome === 'cancelled_running' || outcome === 'cancelled_requeued';
  return { outcome, cancelled, job, message, ...extra };
}

async function cancel(store, id, waitMs) {
  const res = await store.requestCancel(id);
  if (res === null) {
    const dead = await store.getJob(id);
    if (dead && dead.status === 'dead_letter') {
      return answer('dead_letter', dead, `job ${dead.id} (${dead.name}) is in the dead-letter table (${dead.deadLetterReason}): ` +
        `it is not running; nothing to cancel (remove it with: dead-letter purge ${dead.id})`);
    }
    return answer('not_found', null, `no job ${id} in this database (done rows are deleted after their result_ttl)`);
  }
  const j = res.job;
  if (res.outcome === 'cancelled_queued') {
    return answer('cancelled_queued', j, `cancelled job ${j.id} (${j.name}, queue ${j.queue}): it was queued and will not run`);
  }
  if (res.outcome === 'finished') {
    return answer('finished', j, `job ${j.id} (${j.name}) has already finished: its status is ${j.status}; nothing to cancel`);
  }
  let holder = holderOf(j);
  if (waitMs === 0) {
    return answer('requested', j, `job ${j.id} (${j.name}) is running under ${holder}: asked it to cancel the job`);
  }
  const deadline = Date.now() + waitMs;
  for (;;) {
    const cur = await store.getJob(j.id);
    if (cur === null || cur.status === 'dead_letter') {
      return answer('gone', cur, `job ${j.id} (${j.name}) ended before it could be cancelled: its row is gone ` +
        `(done with result_ttl 0, or dead-lettered: see \`soniq-sidecar job ${j.id}\`)`);
    }
    if (cur.status === 'cancelled') {
      return answer('cancelled_running', cur, `cancelled job ${cur.id} (${cur.name}): ${holder} cancelled it (reason user); ` +
        `the row is cancelled, attempts ${cur.attempts} of ${cur.maxAttempts}, and will not be retried`);
    }
    if (cur.status === 'done') {
      return answer('finished_first', cur, `job ${j.id} (${j.name}) finished (done) before ${holder} acted on the cancel`);
    }
    if (cur.status === 'queued') {
      // Given back to the queue meanwhile (a retry, a shutdown, a recovery): cancelled at once.
      const again = await store.requestCancel(j.id);
      if (again && again.outcome === 'cancelled_queued') {
        return answer('cancelled_requeued', again.job, `cancelled job ${j.id} (${j.name}): it had gone back to the queue ` +
          `(attempts ${again.job.attempts} of ${again.job.maxAttempts}) and will not run again`);
      }
      if (again && again.outcome === 'requested' && again.job.workerId) holder = `worker ${again.job.workerId}`;
    }
    if (cur.status === 'processing') {
      const r = await store.cancelRequest(j.id);
      if (r && r.status === 'refused') {
        const handler = r.handler ?? '?';
        const why = r.detail || 'it cannot be interrupted';
        return answer('refused', cur, `job ${j.id} (${j.name}) cannot be cancelled: handler ${handler} runs it as a sync job ` +
          `(cancellable: false) on ${holder}: ${why}. Nothing was stopped; the job runs on and its row ends as the handler's result says`,
        { handler: r.handler ?? null, detail: r.detail ?? null });
      }
    }
    if (Date.now() >= deadline) {
      return answer('no_answer', cur, `job ${j.id} (${j.name}) is still ${cur.status}: ${holder} did not answer within ${waitMs} ms. ` +
        'The request stays recorded: a sidecar holding the job acts on it at its next poll (a Soniq worker never does); ' +
        `run \`soniq-sidecar job ${j.id}\` to see where it is`);
    }
    await sleep(Math.min(POLL_MS, Math.max(0, deadline - Date.now())));
  }
}

module.exports = { cancel };
