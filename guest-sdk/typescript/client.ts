// moat's `moat:plugin/client` in TypeScript's shape: questions for the MCP client (a form, the
// client's model, its roots), each asked in one line. For a world that has
// `import moat:plugin/client@0.1.0;`:
//
//     import { elicit } from "./moat/client";
//     const answer = elicit(`Delete ${name}?`, { type: "object", properties: {} });
//     if (answer.action !== "accept") return "kept";
//
// `moat new` and `moat build` write this file, of their moat's version, to moat/client.ts.
//
// A question stops a call from a 2026-07-28 client, which calls again with the answers: the tool
// then runs again from the start in a fresh instance and each question gets its answer. So a
// tool asks the same questions in the same order each time, and changes nothing before its last.
import * as client from "moat:plugin/client@0.1.0";
import type { ContentBlock } from "moat:plugin/content@0.1.0";
import type { Role } from "moat:plugin/prompt@0.1.0";

export type Question = client.Question;

/** The client's answer to a form. */
export interface Elicited {
    action: "accept" | "decline" | "cancel";
    /** The form's fields, when accepted. */
    content?: Record<string, unknown>;
}

/** The client's model's answer. */
export interface Sampled {
    role: Role;
    content: { type: string; text?: string; [field: string]: unknown };
    model: string;
    stopReason?: string;
}

/** One of the client's roots: a folder or file it works on. */
export interface Root {
    uri: string;
    name?: string;
}

/** One turn of a sampling request: a text said by the user, or a role and what it said. */
export type Turn = string | [Role, string | ContentBlock];

/** What a client may say it can be asked. */
export type Capability = "elicitation" | "elicitation-url" | "sampling" | "roots";

/** The questions `ask` takes: each makes one, to be asked with others at once. */
export const question = {
    /** A form: `schema` is the JSON Schema (an object, or its JSON text) of what the user fills
     * in, with properties of primitive types. */
    form(message: string, schema: object | string): Question {
        const written = typeof schema === "string" ? schema : JSON.stringify(schema);
        return { tag: "elicit", val: { message, schema: written } };
    },
    /** A form the plugin declares in WIT: the function `name` of its exported `forms`
     * interface, whose parameters are the fields; moat writes the schema and checks the answer. */
    typedForm(name: string, message: string): Question {
        return { tag: "elicit-typed", val: { name, message } };
    },
    /** An elicitation that sends the user to the web page `url`. */
    page(message: string, url: string, elicitationId: string): Question {
        return { tag: "elicit-url", val: { message, url, elicitationId } };
    },
    /** A request for the client's model: one text from the user, or a conversation. */
    sampling(messages: string | Turn[], options: { systemPrompt?: string; maxTokens?: number } = {}): Question {
        const turns = (typeof messages === "string" ? [messages] : messages).map((turn) => {
            const [role, said]: [Role, string | ContentBlock] = typeof turn === "string" ? ["user", turn] : turn;
            const content: ContentBlock = typeof said === "string" ? { tag: "text", val: said } : said;
            return { role, content };
        });
        const { systemPrompt, maxTokens = 1000 } = options;
        return { tag: "sample", val: { messages: turns, systemPrompt, maxTokens } };
    },
    /** The client's roots. */
    roots(): Question {
        return { tag: "roots" };
    },
};

/** What the client of this request said it can be asked; a question it cannot be asked fails. */
export function capabilities(): Set<Capability> {
    const declared = client.capabilities();
    const names: [keyof client.ClientCapabilities, Capability][] = [
        ["elicitation", "elicitation"],
        ["elicitationUrl", "elicitation-url"],
        ["sampling", "sampling"],
        ["roots", "roots"],
    ];
    return new Set(names.filter(([flag]) => declared[flag]).map(([, name]) => name));
}

/** Asks every question at once, each under a key of its own, and returns every answer under its
 * key: the client's result, from JSON. Throws the reason (a string) when the client cannot be
 * asked, such as a capability it did not declare: uncaught in a tool that returns
 * `result<_, string>`, that reason is the tool's error. */
export function ask(questions: Record<string, Question>): Record<string, any> {
    let answers: [string, string][];
    try {
        answers = client.ask(Object.entries(questions));
    } catch (error) {
        throw reason(error);
    }
    return Object.fromEntries(answers.map(([key, answer]) => [key, JSON.parse(answer)]));
}

// componentize-js throws a WIT `err` wrapped, its value in `payload`.
function reason(error: unknown): unknown {
    const payload = (error as { payload?: unknown } | null)?.payload;
    return typeof payload === "string" ? payload : error;
}

// The questions asked one at a time, counted to give each a key of its own in the call: a call
// runs in a fresh instance, so a call run again asks them under the same keys.
let asked = 0;

function askOne(kind: string, single: Question): any {
    const key = `${kind}-${++asked}`;
    return ask({ [key]: single })[key];
}

/** Asks the user to fill in a form; the answer's `content` holds the fields when accepted. */
export function elicit(message: string, schema: object | string): Elicited {
    return askOne("elicit", question.form(message, schema));
}

/** Asks the user to fill in the form `name` of the exported `forms` interface; moat checks an
 * accepted answer against the form's types. */
export function elicitTyped(name: string, message: string): Elicited {
    return askOne("elicit", question.typedForm(name, message));
}

/** Asks the client's model; returns its message. */
export function sample(messages: string | Turn[], options: { systemPrompt?: string; maxTokens?: number } = {}): Sampled {
    return askOne("sample", question.sampling(messages, options));
}

/** The client's roots. */
export function roots(): Root[] {
    return askOne("roots", question.roots()).roots;
}
