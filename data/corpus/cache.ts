/** Where the data pipeline keeps what it makes once and reuses: out/data/ at the repository's root. */
import { fileURLToPath } from "node:url";

export function defaultCacheDir(): string {
  return fileURLToPath(new URL("../../out/data", import.meta.url));
}
