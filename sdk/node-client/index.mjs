// The ES module entry: the same objects as require('soniq-client'), so an application that
// mixes import and require gets one Client class.
import cjs from './index.js';

export const { Client, EnqueueError, ArgsError, argsHash, STATS_KEYS } = cjs;
export default cjs;
