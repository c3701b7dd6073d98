/** A database's URL on the same server as another: the credentials, host and port kept, the database changed. */
export const withDatabase = (url: string, database: string) => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}
