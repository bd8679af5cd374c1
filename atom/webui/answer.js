// An answer as its chunks arrive: text, reasoning, tool calls, and its numbers (tokens
// from the usage the server reports; time to first token and tokens/s timed here).

export class Answer {
  constructor() {
    this.message = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
    this.sentAt = performance.now();
    this.firstAt = null;
    this.usage = null;
  }

  apply(chunk) {
    for (const choice of chunk.choices || []) {
      const delta = choice.delta || {};
      const reasoning = delta.reasoning_content || delta.reasoning || "";
      if (this.firstAt === null && (delta.content || reasoning || delta.tool_calls)) {
        this.firstAt = performance.now();
      }
      this.message.content += delta.content || "";
      this.message.reasoning += reasoning;
      for (const call of delta.tool_calls || []) this.applyToolCall(call);
    }
    if (chunk.usage) this.usage = chunk.usage;
  }

  applyToolCall(delta) {
    const calls = this.message.tool_calls;
    const index = delta.index ?? calls.length;
    calls[index] = calls[index] || { id: delta.id, name: "", arguments: "" };
    if (delta.function && delta.function.name) calls[index].name += delta.function.name;
    if (delta.function && delta.function.arguments) {
      calls[index].arguments += delta.function.arguments;
    }
  }

  // The numbers shown under the answer, once it has ended.
  finish() {
    const end = performance.now();
    const tokens = this.usage ? this.usage.completion_tokens : null;
    if (tokens === null) return this.message;
    const ttft = this.firstAt === null ? null : (this.firstAt - this.sentAt) / 1000;
    const streamed = this.firstAt === null ? 0 : (end - this.firstAt) / 1000;
    this.message.stats = {
      tokens,
      ttft_s: ttft,
      // the first token ends the wait; the rest came over `streamed` seconds
      tokens_per_s: streamed > 0 && tokens > 1 ? (tokens - 1) / streamed : null,
    };
    return this.message;
  }
}
