import { readFileSync } from "node:fs";
import { join } from "node:path";

export function readNote(dir: string, name: string): string {
  return readFileSync(join(dir, `${name}.md`), "utf8");
}
