/**
 * The compiler options of a strict host app, for the tests that type-check code the way a host app
 * writes it against the built package (Package, ReadmeExamples).
 *
 * No `skipLibCheck`, so bothy's declarations are checked as well as used. `DOM` is in `lib` because
 * effect's own declarations (effect/crypto) name the Web Crypto types `CryptoKey` and `JsonWebKey`,
 * which only lib.dom declares; that is effect's, not bothy's.
 */
export const compilerOptions = {
  target: "ES2024",
  lib: ["ES2024", "DOM"],
  module: "NodeNext",
  moduleResolution: "NodeNext",
  types: ["node"],
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  noEmit: true,
  verbatimModuleSyntax: true,
  erasableSyntaxOnly: true,
} as const
