// Types of soniq-handler/protocol (protocol.js): the strict decoder and canonical encoder of
// the handler protocol, version 1 (docs/protocol.md). Written by hand; test/types.test.js
// checks them against the module.

/** Any value JSON can hold. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object: what a job's `args` always is. */
export type JsonObject = { [key: string]: JsonValue };

/** Why the sidecar cancels a job. */
export type CancelReason = 'job_timeout' | 'shutdown_timeout' | 'user';
/** How a job ended. */
export type ResultStatus = 'done' | 'failed' | 'snooze' | 'cancelled';

/** The `code` of a ProtocolError: the conformance vectors' error classes. */
export type ProtocolErrorCode =
  | 'oversize'
  | 'invalid_utf8'
  | 'invalid_json'
  | 'not_object'
  | 'missing_field'
  | 'wrong_type'
  | 'unknown_type'
  | 'invalid_value';

/** A frame that breaks the protocol: `code` is its class, `field` the offending field's path, if any. */
export class ProtocolError extends Error {
  constructor(code: ProtocolErrorCode, field?: string | null, detail?: string);
  readonly code: ProtocolErrorCode;
  readonly field: string | null;
}

export interface JobEntry {
  name: string;
  cancellable: boolean;
}

export interface ErrorInfo {
  type: string;
  message: string;
  traceback: string | null;
  retryable: boolean;
  /** 'invalid_arguments': the job's args failed validation; `decode` gives null when absent. */
  reason?: 'invalid_arguments' | null;
}

// The messages as `decode` returns them: every field the type defines is present, optional
// ones as null.

export interface HelloMessage {
  type: 'hello';
  protocol: number;
  sdk: string;
  pid: number;
  jobs: JobEntry[];
  concurrency: number;
  sync_concurrency: number | null;
}

export interface JobMessage {
  type: 'job';
  id: string;
  name: string;
  args: JsonObject;
  attempt: number;
  max_attempts: number;
  queue: string;
  /** Unix milliseconds. */
  deadline: number | null;
  traceparent: string | null;
  /** The soniq_workers id of the sidecar that claimed the job. */
  worker_id: string | null;
  /** The row's scheduled_at in Unix milliseconds; null when the job was queued to run at once. */
  scheduled_at: number | null;
  /** The row's created_at in Unix milliseconds. */
  created_at: number | null;
}

export interface ResultMessage {
  type: 'result';
  id: string;
  status: ResultStatus;
  /** With `done`: the handler's value (parsed JSON when decoded). */
  result: unknown;
  /** With `failed`. */
  error: ErrorInfo | null;
  /** With `snooze`. */
  seconds: number | null;
  reason: string | null;
}

export interface CancelMessage {
  type: 'cancel';
  id: string;
  reason: CancelReason;
}

export interface PingMessage {
  type: 'ping';
  seq: number;
}

export interface PongMessage {
  type: 'pong';
  seq: number;
}

export interface ShutdownMessage {
  type: 'shutdown';
}

/** A child job of `parent`, a job this process holds (docs/protocol.md, "Child jobs"). */
export interface EnqueueMessage {
  type: 'enqueue';
  parent: string;
  /** The child's id: a canonical lower-case UUID. */
  id: string;
  name: string;
  args: JsonObject;
  queue: string | null;
  priority: number | null;
  max_attempts: number | null;
  /** Seconds. */
  delay: number | null;
  dedup_key: string | null;
  unique: boolean | null;
  immediate: boolean | null;
}

export type EnqueueErrorCode = 'invalid' | 'cap' | 'parent' | 'unavailable';

/** The answer to an immediate enqueue. */
export interface EnqueuedMessage {
  type: 'enqueued';
  id: string;
  job_id: string | null;
  error: { code: EnqueueErrorCode; message: string } | null;
}

export type Message =
  | HelloMessage
  | JobMessage
  | ResultMessage
  | CancelMessage
  | PingMessage
  | PongMessage
  | ShutdownMessage
  | EnqueueMessage
  | EnqueuedMessage;

/** A message as `encode` takes it: `type` required; null or missing fields are left out. */
export type EncodableMessage = Message extends infer M
  ? M extends { type: infer T }
    ? { type: T } & { [K in Exclude<keyof M, 'type'>]?: M[K] | null }
    : never
  : never;

export interface DecodeOptions {
  /** Frames longer than this (bytes, without the newline) are `oversize`. Default 16 MiB. */
  maxFrameBytes?: number;
}

/** 16 MiB: the frame size limit unless the sidecar sets another. */
export const DEFAULT_MAX_FRAME_BYTES: number;

/** 10,000: how deep a frame may nest, its own object included; `encode` refuses deeper. */
export const MAX_DEPTH: number;

/** A UUID in its canonical lower-case text form. */
export const UUID_RE: RegExp;

/**
 * Decodes one frame (without its '\n'; a trailing '\r' is stripped). A string is UTF-8
 * encoded first. Throws ProtocolError for anything the protocol does not accept.
 */
export function decode(line: Uint8Array | string, options?: DecodeOptions): Message;

/**
 * A job that arrives as a structured message (the Session stream's Job) rather than as frame
 * text, checked exactly as its frame would be: `job` holds the string fields, `argsText` the
 * args' JSON text (undefined: no args), `ints` the integer fields as the decimal text they
 * would have in the frame. The frame size limit is the caller's check. Throws ProtocolError.
 */
export function decodeJobMessage(
  job: { id: string; name: string; queue: string; traceparent?: string; worker_id?: string },
  argsText: string | undefined,
  ints: Record<string, string>,
): JobMessage;

/**
 * The canonical JSON text of a message (no trailing '\n'). Throws TypeError for an unknown
 * type or a value JSON cannot hold, RangeError for one nested deeper than MAX_DEPTH allows.
 */
export function encode(msg: EncodableMessage): string;
