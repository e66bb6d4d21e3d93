// Types of the claimq package.  Ids and tokens are strings of digits (or
// BigInt when passed in): exact at any size.
import { Pool, PoolConfig } from 'pg';

export type Id = string | bigint;
export type Outcome = 'ok' | 'stale' | 'started' | 'missing' | 'cancelled' | 'finished';
/** A job's headers: strings by name, at most 8,192 bytes as JSON text; traceparent and tracestate carry its creation's trace context. */
export type JobHeaders = Record<string, string>;

export interface Job<P = any> {
  id: string;
  token: string;
  payload: P;
  /** The attempts counted before this claim (with claim's start: true, including this run's). */
  attempts: number;
  /** This run's attempt, counting from 1. */
  attempt: number;
  /** The queue the job came from. */
  queue: string;
  priority: number;
  enqueuedAt: Date;
  expiresAt: Date;
  /** The headers it was enqueued with (with the trace context enqueue added), or null. */
  headers: JobHeaders | null;
}

/** A claimed job; queue, when every job of a call has the same, goes with the call (checked). */
export interface JobRef { id: Id; token: Id; queue?: string | null; }

export interface EnqueueOptions {
  runAt?: Date | null;
  priority?: number;
  dedupKey?: string | null;
  maxAttempts?: number | null;
  onDuplicate?: 'keep' | 'replace';
  groupKey?: string | null;
  /** Wait until each of these jobs is finished (done, dead or cancelled). */
  after?: Id[] | null;
  /** If one of them ended dead or cancelled: cancel this job (the default), or run it anyway. */
  afterFailed?: 'cancel' | 'run';
  /** The job's headers; with tracing, the publish span's context is added (its traceparent and tracestate replace yours). */
  headers?: JobHeaders | null;
}

export interface EnqueueManyOptions {
  runAt?: Date | null;
  priority?: number;
  dedupKeys?: (string | null)[] | null;
  maxAttempts?: number | null;
  onDuplicate?: 'keep' | 'replace';
  groupKeys?: (string | null)[] | null;
  /** Every job of the call waits until each of these jobs is finished (done, dead or cancelled). */
  after?: Id[] | null;
  /** If one of them ended dead or cancelled: cancel the jobs (the default), or run them anyway. */
  afterFailed?: 'cancel' | 'run';
  /** One per payload (null: none); with tracing, the publish span's context is added to each. */
  headers?: (JobHeaders | null)[] | null;
}

/** A row of dependencies(): a job, one job it runs after, and that job's outcome so far. */
export interface Dependency {
  job_id: string;
  after_id: string;
  /** null if the job no longer exists. */
  state: 'waiting' | 'pending' | 'claimed' | 'running' | 'done' | 'dead' | 'cancelled' | null;
  /** Its result, if it is done. */
  result: any;
  /** Its last error, if it is dead. */
  last_error: string | null;
}

export class Client {
  constructor(poolOrOptions?: Pool | PoolConfig);
  readonly pool: Pool;
  end(): Promise<void>;
  query(sql: string, params?: unknown[]): Promise<any[]>;
  enqueue(queue: string, payload: unknown, options?: EnqueueOptions): Promise<string>;
  enqueueMany(queue: string, payloads: unknown[], options?: EnqueueManyOptions): Promise<string[]>;
  /** queue: the queue of every listed job, checked (22023 if one is in another), or null. */
  cancel(jobIds: Id[], queue?: string | null): Promise<{ job_id: string; outcome: Outcome; state: string | null }[]>;
  status(jobIds: Id[], queue?: string | null): Promise<Record<string, any>[]>;
  dependencies(jobIds: Id[], queue?: string | null): Promise<Dependency[]>;
  waitFor(jobIds: Id[], timeoutMs: number, queue?: string | null): Promise<Record<string, any>[]>;
  claim(queue: string, maxJobs?: number,
        options?: { leaseMs?: number; worker?: string; start?: boolean; waitMs?: number }): Promise<Job[]>;
  start(jobs: JobRef[], leaseMs?: number | null): Promise<{ job_id: string; outcome: Outcome; expires_at: Date | null }[]>;
  extend(jobs: JobRef[], leaseMs?: number | null): Promise<{ job_id: string; outcome: Outcome; expires_at: Date | null }[]>;
  complete(jobs: JobRef[], results?: unknown[] | null): Promise<{ job_id: string; outcome: Outcome }[]>;
  fail(jobs: JobRef[], error?: string | null, options?: { retryIn?: number | null; permanent?: boolean }):
    Promise<{ job_id: string; outcome: Outcome; state: string | null; run_at: Date | null }[]>;
  release(jobs: JobRef[]): Promise<{ job_id: string; outcome: Outcome }[]>;
  snooze(jobs: JobRef[], delayMs: number): Promise<{ job_id: string; outcome: Outcome; run_at: Date | null }[]>;
  releaseWorker(queue: string, worker: string): Promise<string>;
  claimKeys(scope: string, keys: string[], ttlMs: number): Promise<{ key: string; token: string }[]>;
  releaseKeys(scope: string, keys: string[], tokens: Id[]): Promise<{ key: string; outcome: Outcome }[]>;
  createQueue(queue: string, options?: Record<string, unknown>): Promise<void>;
  alterQueue(queue: string, options?: Record<string, unknown>): Promise<void>;
  /** A tenant's weight in a fair queue (null resets it to 1; a null groupKey names the jobs without one). */
  setGroupWeight(queue: string, groupKey: string | null, weight: number | null): Promise<void>;
  dropQueue(queue: string, force?: boolean): Promise<void>;
  pauseQueue(queue: string): Promise<void>;
  resumeQueue(queue: string): Promise<void>;
  purgeQueue(queue: string): Promise<string>;
  metrics(): Promise<string>;
  call(fn: string, args?: unknown[], named?: Record<string, unknown>): Promise<any[]>;
}

export interface Logger {
  debug(line: string): void;
  info(line: string): void;
  warn(line: string): void;
  error(line: string): void;
}

export interface WorkerOptions {
  /** One queue; or give queues. */
  queue?: string;
  /** Several queues, each with its concurrency. */
  queues?: Record<string, number>;
  concurrency?: number;
  batch?: number;
  leaseMs?: number;
  heartbeatMs?: number;
  name?: string;
  idleMs?: number;
  maxIdleMs?: number;
  maxBackoffMs?: number;
  pool?: PoolConfig;
  client?: Client;
  /** Stop a handler that runs longer (its signal aborted, reason 'timeout') and fail its job. */
  timeoutMs?: number | null;
  /** After shutdown began, how long running handlers may take; unset: as long as they take. */
  shutdownTimeoutMs?: number | null;
  /** At the shutdown deadline: give running jobs back at once, or leave them to their leases. */
  onShutdownTimeout?: 'release' | 'abandon';
  /** Where lines go; the default writes warn and error to stderr. */
  logger?: Logger;
  /** The older option: one function for every line. */
  log?: (line: string) => void;
  /** Runs in the completion's transaction, on client: committed if and only if the completion takes effect. */
  onComplete?: (job: Job, result: unknown, client: import('pg').PoolClient) => Promise<void> | void;
  /** Runs after a failure of the job took effect; dead: that was its last attempt. */
  onFailure?: (job: Job, error: Error, info: { dead: boolean }) => Promise<void> | void;
}

/** The signal is aborted when the job is cancelled, its lease lost, its timeout or the shutdown deadline passed (reason: 'cancelled', 'stale', 'timeout', 'shutdown'). */
export type Handler<P = any> = (job: Job<P>, context: { signal: AbortSignal }) => unknown | Promise<unknown>;

export class Worker<P = any> {
  constructor(options: WorkerOptions, handler: Handler<P> | Record<string, Handler<P>>);
  readonly completed: number;
  readonly failed: number;
  run(): Promise<void>;
  stop(): void;
}

/** What a job that ran past timeoutMs is failed with. */
export class JobTimeout extends Error {
  constructor(message: string);
}

/** Whether an error is a lost connection or a server going away (retried), not a refusal. */
export function isConnectionError(err: unknown): boolean;

export class Fail extends Error {
  constructor(message: string, options?: { retryIn?: number | null; permanent?: boolean });
  retryIn: number | null;
  permanent: boolean;
}

export class Snooze extends Error {
  constructor(ms: number);
  ms: number;
}
