/** The tensor IR: dtypes, the op table, the SSA graph, its text form and its verifier. */
export * from "./dtype.ts";
export * from "./errors.ts";
export * from "./graph.ts";
export * from "./ops.ts";
export * from "./parse.ts";
export * from "./print.ts";
export * from "./verify.ts";
