/**
 * A lossless JSON parser: JSON.parse cannot tell `1.0` from `1` or keep `9007199254740993`,
 * and a hashed document must refuse both (RFC 8785 here allows integers only, within
 * +/-(2**53-1)). This parser returns integers as `number` (or `bigint` when unsafe, which
 * canonicalJson then refuses with the value named) and any number with a fraction or
 * exponent as a `JsonFloat`, which canonicalJson refuses. Everything else is as JSON.parse.
 */

import { BernsteinError } from "./errors";

/** A number written with a fraction or exponent: kept as its text so it can be refused by name. */
export class JsonFloat {
  constructor(readonly lexeme: string) {}

  toString(): string {
    return this.lexeme;
  }
}

export type JsonValue = null | boolean | number | bigint | string | JsonFloat | JsonValue[] | { [key: string]: JsonValue };

/** Text that is not JSON; `position` is the character offset where parsing stopped. */
export class JsonSyntaxError extends BernsteinError {
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(message, "E_JSON_SYNTAX");
  }
}

const MAX_PARSE_DEPTH = 512;
const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const STRING_RE = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;

export interface ParseOptions {
  /** Refuse an object that repeats a key (default: the last value wins, as Python's json.loads). */
  uniqueKeys?: boolean;
}

/** A JSON object key given twice (with `uniqueKeys`). */
export class DuplicateKey extends JsonSyntaxError {
  constructor(
    readonly key: string,
    position: number,
  ) {
    super(`key ${JSON.stringify(key)} is given twice at character ${position}`, position);
  }
}

export function parseJson(text: string, options: ParseOptions = {}): JsonValue {
  const parser = new Parser(text, options.uniqueKeys ?? false);
  parser.ws();
  const value = parser.value(0);
  parser.ws();
  if (parser.pos !== text.length) parser.fail("unexpected text after the JSON value");
  return value;
}

class Parser {
  pos = 0;

  constructor(
    private readonly text: string,
    private readonly uniqueKeys: boolean,
  ) {}

  fail(message: string): never {
    throw new JsonSyntaxError(`${message} at character ${this.pos}`, this.pos);
  }

  ws(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  value(depth: number): JsonValue {
    const t = this.text;
    const c = t[this.pos];
    if (c === "{" || c === "[") {
      if (depth >= MAX_PARSE_DEPTH) this.fail(`JSON nested deeper than ${MAX_PARSE_DEPTH} levels`);
      return c === "{" ? this.object(depth + 1) : this.array(depth + 1);
    }
    if (c === '"') return this.string();
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    for (const [word, result] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ] as const) {
      if (t.startsWith(word, this.pos)) {
        this.pos += word.length;
        return result;
      }
    }
    return this.fail(c === undefined ? "unexpected end of JSON" : `unexpected character ${JSON.stringify(c)}`);
  }

  string(): string {
    STRING_RE.lastIndex = this.pos;
    const m = STRING_RE.exec(this.text);
    if (m === null) this.fail("malformed string");
    this.pos += m[0].length;
    return JSON.parse(m[0]) as string;
  }

  number(): number | bigint | JsonFloat {
    NUMBER_RE.lastIndex = this.pos;
    const m = NUMBER_RE.exec(this.text);
    if (m === null) this.fail("malformed number");
    const lexeme = m[0];
    this.pos += lexeme.length;
    if (/[.eE]/.test(lexeme)) return new JsonFloat(lexeme);
    const big = BigInt(lexeme);
    if (big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(big);
    return big;
  }

  array(depth: number): JsonValue[] {
    const out: JsonValue[] = [];
    this.pos++;
    this.ws();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value(depth));
      this.ws();
      const c = this.text[this.pos++];
      if (c === "]") return out;
      if (c !== ",") {
        this.pos--;
        this.fail("expected ',' or ']'");
      }
    }
  }

  object(depth: number): { [key: string]: JsonValue } {
    const out: { [key: string]: JsonValue } = {};
    this.pos++;
    this.ws();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.text[this.pos] !== '"') this.fail("expected a string key");
      const keyAt = this.pos;
      const key = this.string();
      if (this.uniqueKeys && Object.prototype.hasOwnProperty.call(out, key)) throw new DuplicateKey(key, keyAt);
      this.ws();
      if (this.text[this.pos] !== ":") this.fail("expected ':'");
      this.pos++;
      this.ws();
      const v = this.value(depth);
      // defineProperty: a "__proto__" key is data, never the prototype. A repeated key keeps the last
      // value, as Python's json.loads (and so `bernstein submit`) does.
      Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
      this.ws();
      const c = this.text[this.pos++];
      if (c === "}") return out;
      if (c !== ",") {
        this.pos--;
        this.fail("expected ',' or '}'");
      }
    }
  }
}
