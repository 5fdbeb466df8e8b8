// demand's read of a model's claim after each idle write (the other half of admit's fence): linearizable, but not one
// JetStream request per write. The claims stream's version (its creation time and last sequence, from a STREAM.INFO
// its leader answers) is read once for every write that finished before the request went out, and a model found
// unclaimed at a version stays unclaimed while the version is the same: nothing was stored in the stream since
// (messages can only have been removed, which can free a model, never claim it). Only when the version moved, or the
// model had a claim, is the key itself read (STREAM.MSG.GET, also leader-answered). At rest — the usual state of a
// busy model with nothing admitted on it — an idle write costs a share of one STREAM.INFO instead of a read.
import { BUCKET_CLAIMS } from '../../events/catalog.js'
import { type JsRequests, kvLast, type RawKvEntry, streamVersion } from '../../pkg/jetstream/js-requests.js'

/** Models remembered as unclaimed at a version; past it the memory is dropped (it only saves reads). */
export const MAX_REMEMBERED = 20_000

export class ClaimReads {
  /** Key → the claims stream version at which it was read unclaimed. */
  private readonly unclaimedAt = new Map<string, string>()
  /** The version request on the wire, and the one queued behind it for callers that came after it was sent. */
  private sent?: Promise<string>
  private queued?: Promise<string>
  /** Requests made (tests, logs): versions read, keys read, answers from memory. */
  readonly stats = { versions: 0, reads: 0, remembered: 0 }

  constructor(
    private readonly js: JsRequests,
    private readonly bucket = BUCKET_CLAIMS,
  ) {}

  /**
   * The key's newest entry as the stream leader has it at some instant after this call began (null: never
   * written; a DEL/PURGE entry: released).
   */
  async read(key: string): Promise<RawKvEntry | null> {
    const version = await this.version()
    if (this.unclaimedAt.get(key) === version) {
      this.stats.remembered++
      return null
    }
    this.stats.reads++
    const entry = await kvLast(this.js, this.bucket, key)
    // Read after the version, so when a later version equals this one nothing changed in between either.
    if (entry?.operation === 'PUT') this.unclaimedAt.delete(key)
    else {
      if (this.unclaimedAt.size >= MAX_REMEMBERED) this.unclaimedAt.clear()
      this.unclaimedAt.set(key, version)
    }
    return entry
  }

  /** A version read by a request sent after this call: joins the queued one, never the one already on the wire. */
  private version(): Promise<string> {
    if (!this.sent) return this.send()
    this.queued ??= this.sent
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined
        return this.sent ?? this.send()
      })
    return this.queued
  }

  private send(): Promise<string> {
    this.stats.versions++
    const sent = streamVersion(this.js, `KV_${this.bucket}`).finally(() => {
      if (this.sent === sent) this.sent = undefined
    })
    this.sent = sent
    return sent
  }
}
