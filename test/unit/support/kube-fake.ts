// The Kubernetes port (pkg/kube/port.ts) as the simulations fake it. A fake names only the requests it models; the
// compiler checks each against the port (its parameters, its answer, its name), and a request it does not model
// fails the run loudly instead of answering something the apiserver never would.
import type { KubeApi, KubeClients } from '../../../pkg/kube/port.js'

const unmodelled = (what: string) => (): never => {
  throw new Error(`Kube.${what} is not modelled by this fake`)
}

/** A KubeApi answering `modelled`; every other request throws. No watch clients: nothing watches in a simulation. */
export function fakeKube(modelled: Partial<KubeApi>): KubeApi & KubeClients {
  // Typed as the port itself, no cast: a request the port renames, or whose parameters or answer change, fails to
  // compile here or in the fake that models it.
  const port: KubeApi & KubeClients = {
    requests: { read: 0, list: 0, write: 0 },
    close: unmodelled('close'),
    whenReachable: unmodelled('whenReachable'),
    getBackfill: unmodelled('getBackfill'),
    listBackfills: unmodelled('listBackfills'),
    getModel: unmodelled('getModel'),
    listCustom: unmodelled('listCustom'),
    listAll: unmodelled('listAll'),
    getCronJob: unmodelled('getCronJob'),
    getJob: unmodelled('getJob'),
    listBackfillJobs: unmodelled('listBackfillJobs'),
    listOwnJobs: unmodelled('listOwnJobs'),
    createJob: unmodelled('createJob'),
    deleteJob: unmodelled('deleteJob'),
    deleteJobPods: unmodelled('deleteJobPods'),
    deleteAttemptJobs: unmodelled('deleteAttemptJobs'),
    deleteJobsPods: unmodelled('deleteJobsPods'),
    setFinalizer: unmodelled('setFinalizer'),
    writeStatus: unmodelled('writeStatus'),
    recordEvent: unmodelled('recordEvent'),
    ...modelled,
    get kc(): never {
      return unmodelled('kc')()
    },
    get batch(): never {
      return unmodelled('batch')()
    },
    get custom(): never {
      return unmodelled('custom')()
    },
    get core(): never {
      return unmodelled('core')()
    },
  }
  return port
}
