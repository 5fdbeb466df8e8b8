// The Kubernetes port: what the functions, pkg/admission and pkg/transport ask of the apiserver, so that a handler's
// Deps name these and not the client class, and a test's fake that drifts from them fails to compile. Kube
// (./client.ts) implements both; type-only, so that naming the port loads no client.
import type { BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, V1CronJob, V1Job } from '@kubernetes/client-node'
import type { ModelBackfill, ModelBackfillStatus } from '../core/api.js'

/** The requests the functions send: the reads decide() needs and the writes it asks for. See Kube for each. */
export interface KubeApi {
  /** Requests sent to the API server, by verb (the benchmark reads it). */
  readonly requests: { read: number; list: number; write: number }
  close(): void
  whenReachable<T>(call: () => Promise<T>, maxWaitMs: number): Promise<T>

  getBackfill(namespace: string, name: string): Promise<ModelBackfill | null>
  listBackfills(namespace?: string): Promise<ModelBackfill[]>
  getModel(namespace: string, name: string): Promise<unknown | null>
  listCustom(plural: string, namespace?: string): Promise<unknown[]>
  listAll(plural: string): Promise<unknown[]>
  getCronJob(namespace: string, name: string): Promise<V1CronJob | null>
  getJob(namespace: string, name: string): Promise<V1Job | null>
  listBackfillJobs(namespaces?: readonly string[]): Promise<V1Job[]>
  listOwnJobs(namespace: string, backfill: string): Promise<V1Job[]>

  createJob(job: V1Job): Promise<{ result: 'created' | 'exists' | 'predecessor'; uid?: string }>
  deleteJob(
    namespace: string,
    name: string,
    uid?: string,
    propagationPolicy?: 'Foreground' | 'Background',
  ): Promise<'deleted' | 'absent' | 'replaced'>
  deleteJobPods(namespace: string, jobUid: string): Promise<void>
  deleteAttemptJobs(namespace: string, backfillValues: string[], attemptValues: string[]): Promise<void>
  deleteJobsPods(namespace: string, jobUids: string[]): Promise<void>
  setFinalizer(backfill: ModelBackfill, present: boolean): Promise<void>
  writeStatus(backfill: ModelBackfill, status: ModelBackfillStatus): Promise<boolean>
  recordEvent(backfill: ModelBackfill, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void>
}

/**
 * The clients the watches list and watch through (the watched copies, pkg/kube/cache.ts; the event source,
 * pkg/transport/watcher.ts): an informer needs the kubeconfig and the generated API clients themselves.
 */
export interface KubeClients {
  readonly kc: KubeConfig
  readonly batch: BatchV1Api
  readonly custom: CustomObjectsApi
  /** lifecycle's watch of the attempts' pods (./cache.ts backfillPodsCache). */
  readonly core: CoreV1Api
}
