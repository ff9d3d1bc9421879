'use strict';
// This SDK's name and version as sent in hello, and the protocol versions it speaks.

const { version } = require('./package.json');

const SDK = `soniq-node/${version}`;
const SUPPORTED_PROTOCOLS = Object.freeze([1]);

module.exports = { SDK, SUPPORTED_PROTOCOLS };
