/**
 * A compact JWS (RFC 7515) signed with a private key: what both native providers take as proof of
 * the sender, APNs as its provider token (ES256) and Google's OAuth endpoint as the assertion of
 * the JWT-bearer grant (RS256).
 *
 * What it keeps true: ES256 signatures are the 64-byte `r || s` JWS wants (`ieee-p1363`), never
 * the DER that `crypto.sign` gives by default, which every verifier refuses.
 */
import { type KeyObject, sign as signWith } from "node:crypto"

export type Algorithm = "ES256" | "RS256"

const part = (value: object) => Buffer.from(JSON.stringify(value)).toString("base64url")

/** `header.claims.signature`, each base64url; `alg` is set from `algorithm`. */
export const sign = (
  algorithm: Algorithm,
  key: KeyObject,
  header: Readonly<Record<string, string>>,
  claims: Readonly<Record<string, string | number>>,
): string => {
  const input = `${part({ alg: algorithm, ...header })}.${part(claims)}`
  const signature =
    algorithm === "ES256"
      ? signWith("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" })
      : signWith("sha256", Buffer.from(input), key)
  return `${input}.${signature.toString("base64url")}`
}
