/** bernstein producer SDK for TypeScript: see README.md. */

export * from "./activity";
export * from "./avro";
export * from "./browser_session";
export * from "./canonical";
export * from "./cas";
export * from "./computer_use";
export * from "./config";
export * from "./description";
export * from "./emitter";
export * from "./errors";
export * from "./identity";
export * from "./json";
export * from "./partitioning";
export * from "./pointer";
export * from "./records";
export * from "./tlog";
export { runConformance, Tally } from "./conformance";
