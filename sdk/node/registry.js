'use strict';
// What an App registers: handlers by name ({fn, cancellable, validate}), middleware (the first
// registered outermost) and hooks by kind, each in registration order.
class Registry {
  constructor() {
    this.handlers = new Map();
    this.hooks = { beforeJob: [], afterJob: [], onError: [] };
    this.middleware = [];
  }

  // The `jobs` list of hello, in registration order.
  jobs() {
    return [...this.handlers].map(([name, h]) => ({ name, cancellable: h.cancellable }));
  }
}

module.exports = { Registry };
