'use strict';
// The results attach mode keeps until a session acknowledges them (docs/protocol.md, "The
// Session stream and attach mode").

const { log } = require('./log');

// Results of jobs that ended while no session was open, or that were sent on a session that
// ended before acknowledging them, wait for the next one; at most this many (the oldest is
// dropped first, with a WARN line). A sidecar sends a process far fewer jobs than this (its
// concurrency), so only a process left alone for long gets there.
const MAX_KEPT_RESULTS = 1000;

// One session's side of the acknowledgements: whether its sidecar acknowledges results, and the
// results sent on it that it has not acknowledged yet.
class Sent {
  constructor() {
    this.acks = false; // the sidecar said it acknowledges results (an Ack)
    // Whether a message came from the sidecar yet: one that acknowledges results sends an Ack
    // first, so anything else first means it never will.
    this.heard = false;
    this.unacked = new Map(); // id -> result (a Result message of session.js; only its id is read here)
  }
}

// Results of attach mode, each kept until a session acknowledges it. One that ends with no
// session open, or that was sent on a session that ended without acknowledging it, waits here
// for the next session (`kept`, oldest first, at most `limit`). A spawned process (`attach`
// false) has no next session: nothing is kept.
class Ledger {
  constructor(attach, limit = MAX_KEPT_RESULTS) {
    this.attach = attach;
    this.limit = limit;
    this.kept = new Map(); // id -> result, as in Sent
    // A sidecar acknowledged results once: from then on a session that ends with results
    // unacknowledged hands them to the next one.
    this.peerAcks = false;
  }

  // A session opens: the results kept for it, to send it, tracked as unacknowledged until its
  // sidecar says whether it acknowledges.
  open() {
    const sent = new Sent();
    const kept = [...this.kept.values()];
    this.kept = new Map();
    for (const r of kept) sent.unacked.set(r.id, r);
    return { sent, kept };
  }

  // A message came on the session (`isAck`: an Ack).
  heard(s, isAck) {
    if (s.heard) return;
    s.heard = true;
    if (!isAck) s.unacked.clear(); // an older sidecar: it never acknowledges
  }

  // A result went out on the session.
  sent(s, r) {
    if (this.attach && (s.acks || !s.heard)) s.unacked.set(r.id, r);
  }

  // The sidecar settled these results; true if it named any.
  acked(s, ids) {
    s.acks = true;
    this.peerAcks = true;
    for (const id of ids) s.unacked.delete(id);
    return ids.length > 0;
  }

  // The session is over: the results written on it that the sidecar may never have received or
  // recorded go to the next session, when the sidecar acknowledges results.
  closed(s, why) {
    if (s.acks || this.peerAcks) for (const r of s.unacked.values()) this.keep(r, why);
    s.unacked.clear();
  }

  keep(r, why) {
    if (!this.attach) return; // spawned: there is no next session
    this.kept.delete(r.id);
    if (this.kept.size >= this.limit) {
      const lost = this.kept.keys().next().value;
      this.kept.delete(lost);
      log(`WARN: more than ${this.limit} results wait for a session; the result of job ${lost} is dropped`);
    }
    this.kept.set(r.id, r);
    log(`job ${r.id} ${why}; its result waits for the next session`);
  }

  // The session acknowledges results and has not acknowledged some it was sent.
  static awaiting(s) {
    return Boolean(s && s.acks && s.unacked.size > 0);
  }

  // Ids of results no session received (or acknowledged).
  lost(s) {
    return [...this.kept.keys(), ...(s && s.acks ? s.unacked.keys() : [])];
  }
}

module.exports = { Ledger, Sent, MAX_KEPT_RESULTS };
