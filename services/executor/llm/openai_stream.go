package llm

import (
	"context"
	"errors"
	"io"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// streamCompletion makes one streamed chat completion (stream: true,
// stream_options.include_usage) and assembles the chunks — content, tool
// call deltas by index, finish reason, usage — into the answer a
// non-streamed call would have given. Content deltas go to onToken as they
// arrive (nil: nowhere).
func streamCompletion(ctx context.Context, c *openai.Client, creq openai.ChatCompletionRequest, onToken func(string)) (openai.ChatCompletionResponse, error) {
	creq.Stream = true
	creq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	st, err := c.CreateChatCompletionStream(ctx, creq)
	if err != nil {
		return openai.ChatCompletionResponse{}, err
	}
	defer st.Close()
	a := assembly{byIndex: map[int]*openai.ToolCall{}, onToken: onToken}
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return a.out, err
		}
		a.add(chunk)
	}
	if a.chunks == 0 {
		return a.out, errors.New("the model's stream carried no answer (not server-sent events?)")
	}
	return a.answer(), nil
}

// assembly is a streamed answer being put together, chunk by chunk.
type assembly struct {
	out     openai.ChatCompletionResponse
	content strings.Builder
	calls   []*openai.ToolCall
	byIndex map[int]*openai.ToolCall
	finish  openai.FinishReason
	chunks  int
	onToken func(string)
}

// add takes one chunk: its model, id and usage, and the deltas of the
// first choice (the only one asked for).
func (a *assembly) add(chunk openai.ChatCompletionStreamResponse) {
	a.chunks++
	if chunk.Model != "" {
		a.out.Model = chunk.Model
	}
	if chunk.ID != "" {
		a.out.ID = chunk.ID
	}
	if u := chunk.Usage; u != nil {
		a.out.Usage = *u
	}
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue // we ask for one choice
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
		if d := ch.Delta.Content; d != "" {
			a.content.WriteString(d)
			if a.onToken != nil {
				a.onToken(d)
			}
		}
		for i, tc := range ch.Delta.ToolCalls {
			a.addCall(i, tc)
		}
	}
}

// addCall adds the i-th tool call delta of a chunk to the call it
// continues (by its index; a delta without one, by its position, unless
// it names another id) or to a new one.
func (a *assembly) addCall(i int, tc openai.ToolCall) {
	idx := i
	if tc.Index != nil {
		idx = *tc.Index
	}
	cur, ok := a.byIndex[idx]
	if !ok || (tc.Index == nil && tc.ID != "" && cur.ID != "" && cur.ID != tc.ID) {
		cur = &openai.ToolCall{Type: openai.ToolTypeFunction}
		a.byIndex[idx] = cur
		a.calls = append(a.calls, cur)
	}
	if tc.ID != "" {
		cur.ID = tc.ID
	}
	if tc.Function.Name != "" {
		cur.Function.Name += tc.Function.Name
	}
	cur.Function.Arguments += tc.Function.Arguments
}

// answer is the assembled answer, as a non-streamed call gives it.
func (a *assembly) answer() openai.ChatCompletionResponse {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: a.content.String()}
	for _, tc := range a.calls {
		msg.ToolCalls = append(msg.ToolCalls, *tc)
	}
	out := a.out
	out.Choices = []openai.ChatCompletionChoice{{Message: msg, FinishReason: a.finish}}
	if out.Usage.TotalTokens == 0 {
		out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	}
	return out
}
