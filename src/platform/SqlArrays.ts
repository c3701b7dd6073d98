/**
 * Rows passed to `unnest` as one typed array per column, so the planner knows their count and a
 * statement handles a batch in one round trip.
 */

/**
 * A column's values; a column holding only NULLs goes as an empty array (`unnest` pads it with
 * NULLs), because the driver cannot type an array of nothing but NULLs.
 */
export const column = <R, A>(
  rows: ReadonlyArray<R>,
  get: (row: R) => A | null | undefined,
): ReadonlyArray<A | null> => {
  const values = rows.map((row) => get(row) ?? null)
  return values.every((v) => v === null) ? [] : values
}
