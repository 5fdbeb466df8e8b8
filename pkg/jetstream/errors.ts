// What a JetStream error means to the code that got it: something not there (yet), a compare-and-set that lost, or
// a stream without a leader, which passes by itself and is ridden out (acrossLeaderChange).

/** JetStream's "stream not found", "consumer not found", "no message found". */
export const isNotFound = (err: unknown) => /not found|no message found/i.test(String((err as Error)?.message ?? err))

/**
 * A compare-and-set write refused because the key moved (KV update, create of an existing key, or an expected-last
 * sequence publish): JetStream's descriptions and error codes, as nats.js and the raw requests (js-requests.ts)
 * report them.
 */
export const isCasConflict = (err: unknown) =>
  /wrong last sequence|key exists|10071|10164/i.test(String((err as Error)?.message ?? err))

/**
 * Nothing answers for a stream while its leader changes (a scale, a stepdown, a server rolling): a publish gets "no
 * responders" (nats.js: JetStreamNotEnabled), a leader read times out or is answered "JetStream system temporarily
 * unavailable". The election takes well under a second to a few seconds; callers that must not fail an install or a
 * sweep on it ride it out with acrossLeaderChange, within its deadline.
 */
export const isLeaderless = (err: unknown) =>
  err instanceof Error &&
  (/TimeoutError|NoResponders|JetStreamNotEnabled/.test(err.name) ||
    /no responders|jetstream is not enabled|temporarily unavailable|timeout/i.test(err.message))

/**
 * How long provisioning rides out a JetStream that does not answer: a cluster that lost its meta leader (a server
 * crashed or is rolling) creates and looks up nothing until the others have elected a new one, several seconds —
 * more than one request's deadline, and a busy cluster may take as long to create a replicated stream.
 */
export const PROVISION_DEADLINE_MS = 90_000

/** Calls `call` again (backing off up to 1 s) while it fails for want of a leader, until `deadlineMs` has passed. */
export async function acrossLeaderChange<T>(what: string, call: () => Promise<T>, deadlineMs = 30_000): Promise<T> {
  const deadline = Date.now() + deadlineMs
  for (let pause = 100; ; pause = Math.min(pause * 2, 1_000)) {
    try {
      return await call()
    } catch (err) {
      if (!isLeaderless(err) || Date.now() + pause > deadline) {
        if (isLeaderless(err)) {
          throw new Error(
            `${what}: JetStream did not answer for ${deadlineMs / 1000} s — no leader (an election, a server restarting) or JetStream not enabled (${err})`,
          )
        }
        throw err
      }
      await new Promise((r) => setTimeout(r, pause))
    }
  }
}
