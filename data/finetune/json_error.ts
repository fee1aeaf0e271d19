/**
 * Where a JSON text goes wrong. JSON.parse's messages do not always say where (V8 often quotes the
 * text instead), so on failure a small recursive-descent scan finds the first bad character and its
 * line and column, for messages like "squad.json:12:5: expected ',' or '}'".
 */

export interface JsonErrorAt {
  line: number;
  column: number;
  message: string;
}

class Stop {
  constructor(readonly at: number, readonly message: string) {}
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

export function locateJsonError(text: string): JsonErrorAt | undefined {
  const n = text.length;
  let i = 0;
  const stop = (message: string): never => {
    throw new Stop(i, i >= n ? "unexpected end of the file" : message);
  };
  const ws = () => {
    for (let c = text.charCodeAt(i); c === 32 || c === 9 || c === 10 || c === 13; c = text.charCodeAt(++i));
  };
  const string = () => {
    i++;
    for (;;) {
      if (i >= n) stop("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 34) {
        i++;
        return;
      }
      if (c === 92) {
        const e = text[i + 1];
        if (e === "u") {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) stop("bad \\u escape");
          i += 6;
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) i += 2;
        else stop("bad escape in string");
      } else if (c < 0x20) stop("control character inside a string (unescaped newline?)");
      else i++;
    }
  };
  const value = (): void => {
    ws();
    const c = text[i];
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      i++;
      ws();
      if (text[i] === close) return void i++;
      for (;;) {
        if (c === "{") {
          ws();
          if (text[i] !== '"') stop("expected a property name in double quotes");
          string();
          ws();
          if (text[i] !== ":") stop("expected ':' after a property name");
          i++;
        }
        value();
        ws();
        if (text[i] === ",") i++;
        else if (text[i] === close) return void i++;
        else stop(`expected ',' or '${close}'`);
      }
    }
    if (c === '"') return string();
    for (const lit of ["true", "false", "null"]) {
      if (text.startsWith(lit, i)) return void (i += lit.length);
    }
    NUMBER.lastIndex = i;
    if (NUMBER.test(text)) return void (i = NUMBER.lastIndex);
    stop("expected a value");
  };
  try {
    value();
    ws();
    if (i < n) stop("unexpected text after the JSON value");
    return undefined;
  } catch (e) {
    if (!(e instanceof Stop)) throw e;
    const before = text.slice(0, e.at);
    const line = before.split("\n").length;
    return { line, column: e.at - before.lastIndexOf("\n"), message: e.message };
  }
}
