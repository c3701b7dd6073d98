/**
 * A map of at most `max` entries that drops the least recently used first: for what a worker
 * derives again and again from the same input (a browser's decoded key, a webhook secret's key, a
 * URL's checked target), where the input set is unbounded but the working set is not.
 *
 * A `Map` iterates in insertion order, so moving an entry to the end on each use keeps the least
 * recently used first.
 */
export class LruCache<K, V> {
  private readonly entries = new Map<K, V>()
  readonly max: number

  constructor(max: number) {
    this.max = max
  }

  get size(): number {
    return this.entries.size
  }

  /** The value of `key`, which becomes the most recently used; undefined when absent. */
  get(key: K): V | undefined {
    const value = this.entries.get(key)
    if (value !== undefined) {
      this.entries.delete(key)
      this.entries.set(key, value)
    }
    return value
  }

  /** Keeps `value` under `key` as the most recently used, dropping the least recently used past `max`; returns it. */
  set(key: K, value: V): V {
    this.entries.delete(key)
    this.entries.set(key, value)
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value as K)
    return value
  }

  /** The value of `key`, made by `make` and kept when absent. */
  getOrSet(key: K, make: () => V): V {
    const value = this.get(key)
    return value !== undefined ? value : this.set(key, make())
  }
}
