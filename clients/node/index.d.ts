// Types of the claimq package.  Ids and tokens are strings of digits (or
// BigInt when passed in): exact at any size.
import { Pool, PoolConfig } from 'pg';

export type Id = string | bigint;
export type Outcome = 'ok' | 'stale' | 'started' | 'missing' | 'cancelled' | 'finished';

export interface Job<P = any> {
  id: string;
  token: string;
  payload: P;
  attempts: number;
  priority: number;
  enqueuedAt: Date;
  expiresAt: Date;
}

export interface JobRef { id: Id; token: Id; }

export interface EnqueueOptions {
  runAt?: Date | null;
  priority?: number;
  dedupKey?: string | null;
  maxAttempts?: number | null;
  onDuplicate?: 'keep' | 'replace';
  groupKey?: string | null;
}

export interface EnqueueManyOptions {
  runAt?: Date | null;
  priority?: number;
  dedupKeys?: (string | null)[] | null;
  maxAttempts?: number | null;
  onDuplicate?: 'keep' | 'replace';
  groupKeys?: (string | null)[] | null;
}

export class Client {
  constructor(poolOrOptions?: Pool | PoolConfig);
  readonly pool: Pool;
  end(): Promise<void>;
  query(sql: string, params?: unknown[]): Promise<any[]>;
  enqueue(queue: string, payload: unknown, options?: EnqueueOptions): Promise<string>;
  enqueueMany(queue: string, payloads: unknown[], options?: EnqueueManyOptions): Promise<string[]>;
  cancel(jobIds: Id[]): Promise<{ job_id: string; outcome: Outcome; state: string | null }[]>;
  status(jobIds: Id[]): Promise<Record<string, any>[]>;
  waitFor(jobIds: Id[], timeoutMs: number): Promise<Record<string, any>[]>;
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
  dropQueue(queue: string, force?: boolean): Promise<void>;
  pauseQueue(queue: string): Promise<void>;
  resumeQueue(queue: string): Promise<void>;
  purgeQueue(queue: string): Promise<string>;
  metrics(): Promise<string>;
  call(fn: string, args?: unknown[], named?: Record<string, unknown>): Promise<any[]>;
}

export interface WorkerOptions {
  queue: string;
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
  log?: (line: string) => void;
  /** Runs in the completion's transaction, on client: committed if and only if the completion takes effect. */
  onComplete?: (job: Job, result: unknown, client: import('pg').PoolClient) => Promise<void> | void;
}

/** The signal is aborted when the job is cancelled or its lease lost (reason: the outcome). */
export type Handler<P = any> = (job: Job<P>, context: { signal: AbortSignal }) => unknown | Promise<unknown>;

export class Worker<P = any> {
  constructor(options: WorkerOptions, handler: Handler<P>);
  readonly completed: number;
  readonly failed: number;
  run(): Promise<void>;
  stop(): void;
}

export class Fail extends Error {
  constructor(message: string, options?: { retryIn?: number | null; permanent?: boolean });
  retryIn: number | null;
  permanent: boolean;
}

export class Snooze extends Error {
  constructor(ms: number);
  ms: number;
}
