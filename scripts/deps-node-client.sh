#!/usr/bin/env bash
# make deps-node-client: sdk/node-client's dev tree (pg, better-sqlite3, typescript), from its
# package-lock.json with `npm ci`. better-sqlite3 is compiled from source where no prebuilt
# binary can be fetched (about a CPU-minute, g++ and node's headers: .ci/run checks them), so
# the installed tree is kept in the user cache directory, keyed by the lock file and the node
# version, and copied in while both are unchanged (as bench/run.sh keeps the peers' installs).
set -euo pipefail
cd "$(dirname "$0")/../sdk/node-client"

lock=package-lock.json
stamp=node_modules/.installed-from-lock
key="$( (cat "$lock"; node --version) | sha256sum | cut -c1-12)"
if [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$key" ]]; then exit 0; fi

# node-gyp builds against the headers of the node that runs it (.ci/run checks they are there),
# never against headers it would download: nodejs.org is not reachable from every machine, and a
# new user's npm has no nodedir set.
node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
if [[ -f "$node_prefix/include/node/node.h" ]]; then export npm_config_nodedir="${npm_config_nodedir:-$node_prefix}"; fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/soniq-sidecar"
saved="$cache/node-client-modules-$key"
mkdir -p "$cache"
(
  flock 9
  if [[ ! -f "$saved/.installed" ]]; then
    echo "cd sdk/node-client && npm ci" >&2
    # node-gyp compiles better-sqlite3's two translation units (the SQLite amalgamation and
    # the binding) one after the other unless told how many jobs: JOBS=max runs one per core.
    JOBS="${JOBS:-max}" npm ci --no-audit --no-fund --silent
    rm -rf "$saved.tmp" && mkdir -p "$saved.tmp"
    cp -a node_modules "$saved.tmp/"
    echo "$key" >"$saved.tmp/.installed"
    rm -rf "$saved" && mv "$saved.tmp" "$saved"
  else
    echo "sdk/node-client: node_modules from $saved (npm ci of the same lock file)" >&2
    rm -rf node_modules
    cp -a "$saved/node_modules" .
  fi
  echo "$key" >"$stamp"
) 9>"$saved.lock"
