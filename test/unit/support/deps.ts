// Typed fakes of what a handler is given (pkg/transport/function.ts Deps) for unit tests that need only a few of its
// members. The fake is checked against the real types: a member Deps does not have, or one given a shape the real
// one does not allow, fails to compile, so a fake cannot drift from Deps unnoticed the way a cast would let it.
import type { SharedCaches } from '../../../pkg/kube/shared-caches.js'
import type { Deps } from '../../../pkg/transport/function.js'

/**
 * A part of T: any member may be left out, and one that is given has T's shape — a function takes T's parameters and
 * returns a part of T's result, an object is a part of T's object. Arrays are given whole.
 */
export type Fake<T> = T extends (...args: infer A) => infer R
  ? (...args: A) => Fake<R>
  : T extends Promise<infer U>
    ? Promise<Fake<U>>
    : T extends readonly unknown[]
      ? T
      : T extends object
        ? { [K in keyof T]?: Fake<T[K]> }
        : T

/** A T with only `parts` in it, for the objects a fake Deps hands out (a message, a subscription). */
export function fake<T>(parts: Fake<T>): T {
  return parts as T
}

/**
 * Deps with only `parts` in it. What the test leaves out is absent: code under test that reaches for it fails with
 * a TypeError, which says the test gave too little rather than hiding it.
 */
export function fakeDeps(parts: Fake<Deps> = {}): Deps {
  return parts as Deps
}

/** SharedCaches with only `parts` in it (its private members are the class's own: none is read from outside). */
export function fakeCaches(parts: Fake<SharedCaches>): SharedCaches {
  return parts as SharedCaches
}
