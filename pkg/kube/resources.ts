// The names by which the functions address Kubernetes objects: our custom resources' plurals and the label the Job
// controller puts on a Job's pods. No import of @kubernetes/client-node here: demand and source, which make no API
// call, load this and never the client (~1 MB of the bundle, its model classes built at load: cold start).

export const PLURALS = {
  backfills: 'modelbackfills',
  models: 'models',
  gamingSessions: 'gamingsessions',
  gpuLeases: 'gpuleases',
} as const

/** The label the Job controller puts on every pod of a Job (Kubernetes ≥ 1.27), with the Job's UID. */
export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid'
