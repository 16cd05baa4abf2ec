/**
 * Pointer targets (the Python SDK's schemas/documents/pointer.py): where an action given in screen
 * coordinates landed, written as the action's target.
 *
 * The computer-use tools of model APIs act at a point of the screen ("click at (412, 230)"), not on a
 * selector. Before such an action is anchored, the driver resolves the point to the element under it,
 * and the action's target records both, as the canonical JSON (RFC 8785) of one object:
 *
 *     {"at": [x, y], "element": "<selector of the element under the point>"}
 *         click, double_click, right_click, hover, scroll
 *     {"at": [x0, y0], "element": "...", "to": [x1, y1], "to_element": "..."}
 *         drag (from a point to a point)
 *     {"element": "<selector>", "to_element": "<selector>"}
 *         drag (from an element to an element)
 *     {"element": "<selector of the focused element>", "focused": true}
 *         type (keyboard input goes to whatever has the focus)
 *
 * A target that starts with `{` is a pointer target: a selector or a URL never does. `element` is ""
 * when nothing is under the point. Coordinates are the screenshot's pixels (the viewport's CSS pixels):
 * integers from 0 to MAX_COORDINATE. There is exactly one spelling of each target (the canonical
 * bytes), so the same action anchors to the same bytes in every SDK; `parsePointerTarget` therefore
 * refuses any other spelling. browser.json's pointer_targets and invalid_proposals pin it. Pure: no I/O.
 */

import { canonicalText } from "./canonical";
import { BernsteinError } from "./errors";
import { JsonValue, parseJson } from "./json";

/** The largest coordinate a pointer target may name (a screen is far smaller; a bound keeps the bytes bounded). */
export const MAX_COORDINATE = 100_000;
/** Action kinds whose target may be a pointer target (a drag's must be). */
export const POINTER_KINDS = ["click", "double_click", "drag", "hover", "right_click", "scroll", "type"] as const;
const AT_KINDS = ["click", "double_click", "hover", "right_click", "scroll"];
const KEYS = ["at", "element", "focused", "to", "to_element"];

/** A point of the screenshot, in its pixels: [x, y]. */
export type Point = readonly [number, number];

/** The fields of a pointer target (`toElement` is written `to_element`); absent ones are left out of the text. */
export interface PointerTargetFields {
  readonly element: string;
  readonly at?: Point;
  readonly to?: Point;
  /** "" is an element too: nothing was under the end point. */
  readonly toElement?: string;
  readonly focused?: boolean;
}

/** An action target that starts with `{` but is not a pointer target its kind allows. */
export class MalformedPointerTarget extends BernsteinError {
  constructor(message: string) {
    super(message, "E_MALFORMED_POINTER_TARGET");
  }
}

/** Where a pointer or keyboard action landed: a point and the element under it, or the focused element. */
export class PointerTarget implements PointerTargetFields {
  readonly element: string;
  readonly at?: Point;
  readonly to?: Point;
  readonly toElement?: string;
  readonly focused: boolean;

  constructor(fields: PointerTargetFields) {
    this.element = fields.element;
    if (fields.at !== undefined) this.at = [fields.at[0], fields.at[1]];
    if (fields.to !== undefined) this.to = [fields.to[0], fields.to[1]];
    if (fields.toElement !== undefined) this.toElement = fields.toElement;
    this.focused = fields.focused === true;
  }

  /**
   * The target as the action records it: canonical JSON, keys in RFC 8785 order. It is the action's
   * `target`, so the same pointer action always anchors to the same bytes. It checks no shape
   * (`parsePointerTarget` does, for a kind); a lone surrogate or a coordinate that is no safe integer
   * has no canonical form (CanonicalizationError).
   */
  text(): string {
    const document: Record<string, unknown> = { element: this.element };
    if (this.at !== undefined) document["at"] = [...this.at];
    if (this.to !== undefined) document["to"] = [...this.to];
    if (this.toElement !== undefined) document["to_element"] = this.toElement;
    if (this.focused) document["focused"] = true;
    return canonicalText(document);
  }
}

/** True when `target` is written as a pointer target (it starts with `{`). */
export function isPointerTarget(target: string): boolean {
  return target.startsWith("{");
}

/**
 * The pointer target `target` of an action of `kind`. It accepts exactly what the Python reference
 * accepts: only the known keys, `element` a string, `to_element` a string, `focused` only true, points
 * two integers from 0 to MAX_COORDINATE, a shape `kind` takes, and text equal to its canonical
 * spelling (so no two texts name the same target); anything else is a `MalformedPointerTarget`
 * saying what is wrong.
 */
export function parsePointerTarget(target: string, kind: string): PointerTarget {
  if (!(POINTER_KINDS as readonly string[]).includes(kind)) throw new MalformedPointerTarget(`a ${kind} action takes no pointer target`);
  let value: JsonValue;
  try {
    value = parseJson(target);
  } catch {
    throw new MalformedPointerTarget("a target that starts with '{' must be a JSON object (a pointer target)");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value) || !isPlainObject(value)) {
    throw new MalformedPointerTarget("a pointer target must be a JSON object");
  }
  const document = value as { [key: string]: JsonValue };
  const has = (key: string): boolean => Object.prototype.hasOwnProperty.call(document, key);
  const unknown = Object.keys(document)
    .filter((k) => !KEYS.includes(k))
    .sort();
  if (unknown.length > 0) throw new MalformedPointerTarget(`a pointer target has no field ${JSON.stringify(unknown[0])} (only ${KEYS.join(", ")})`);
  const element = has("element") ? document["element"] : undefined;
  if (typeof element !== "string") throw new MalformedPointerTarget("a pointer target names its element: 'element' must be a string");
  const toElement = has("to_element") ? document["to_element"] : null; // null stands for absent (and is then not canonical)
  if (toElement !== null && typeof toElement !== "string") throw new MalformedPointerTarget("'to_element' must be a string");
  if (has("focused") && document["focused"] !== true) throw new MalformedPointerTarget("'focused' is written only as true");
  const parsed = new PointerTarget({
    element,
    at: point(document, "at"),
    to: point(document, "to"),
    toElement: toElement ?? undefined,
    focused: has("focused"),
  });
  requireShape(parsed, kind);
  let canonical: string | undefined;
  try {
    canonical = parsed.text();
  } catch {
    canonical = undefined; // a lone surrogate: no canonical form, so not a pointer target
  }
  if (canonical !== target) throw new MalformedPointerTarget("a pointer target must be written in canonical JSON (RFC 8785: sorted keys, no spaces)");
  return parsed;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

function point(document: { [key: string]: JsonValue }, name: string): Point | undefined {
  if (!Object.prototype.hasOwnProperty.call(document, name)) return undefined;
  const value = document[name];
  if (value === null) throw new MalformedPointerTarget(`${JSON.stringify(name)} must be a point [x, y], not null`);
  // parseJson gives an integer as a number (a bigint beyond 2**53, a JsonFloat for 1.0, 1.5 or 1e2)
  const coordinate = (v: JsonValue | undefined): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_COORDINATE;
  if (!Array.isArray(value) || value.length !== 2 || !coordinate(value[0]) || !coordinate(value[1])) {
    throw new MalformedPointerTarget(`${JSON.stringify(name)} must be a point [x, y] of integers from 0 to ${MAX_COORDINATE}`);
  }
  return [value[0] as number, value[1] as number];
}

function requireShape(t: PointerTarget, kind: string): void {
  if (kind === "type") {
    if (!t.focused || t.at !== undefined || t.to !== undefined || t.toElement !== undefined) {
      throw new MalformedPointerTarget('a type action\'s pointer target is {"element": ..., "focused": true}');
    }
    return;
  }
  if (t.focused) throw new MalformedPointerTarget(`a ${kind} action does not act on the focused element`);
  if (kind === "drag") {
    if (t.toElement === undefined || (t.at === undefined) !== (t.to === undefined)) {
      throw new MalformedPointerTarget("a drag's pointer target names both ends: 'element' and 'to_element', with 'at' and 'to' or neither");
    }
    return;
  }
  if (AT_KINDS.includes(kind) && (t.at === undefined || t.to !== undefined || t.toElement !== undefined)) {
    throw new MalformedPointerTarget(`a ${kind} action's pointer target is {"at": [x, y], "element": ...}`);
  }
}
