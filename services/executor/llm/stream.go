package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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

	var (
		out     openai.ChatCompletionResponse
		content strings.Builder
		calls   []*openai.ToolCall
		byIndex = map[int]*openai.ToolCall{}
		finish  openai.FinishReason
		chunks  int
	)
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, err
		}
		chunks++
		if chunk.Model != "" {
			out.Model = chunk.Model
		}
		if chunk.ID != "" {
			out.ID = chunk.ID
		}
		if u := chunk.Usage; u != nil {
			out.Usage = *u
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // we ask for one choice
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			if d := ch.Delta.Content; d != "" {
				content.WriteString(d)
				if onToken != nil {
					onToken(d)
				}
			}
			for i, tc := range ch.Delta.ToolCalls {
				idx := i
				if tc.Index != nil {
					idx = *tc.Index
				}
				cur, ok := byIndex[idx]
				if !ok || (tc.Index == nil && tc.ID != "" && cur.ID != "" && cur.ID != tc.ID) {
					cur = &openai.ToolCall{Type: openai.ToolTypeFunction}
					byIndex[idx] = cur
					calls = append(calls, cur)
				}
				if tc.ID != "" {
					cur.ID = tc.ID
				}
				if tc.Function.Name != "" {
					cur.Function.Name += tc.Function.Name
				}
				cur.Function.Arguments += tc.Function.Arguments
			}
		}
	}
	if chunks == 0 {
		return out, errors.New("the model's stream carried no answer (not server-sent events?)")
	}
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: content.String()}
	for _, tc := range calls {
		msg.ToolCalls = append(msg.ToolCalls, *tc)
	}
	out.Choices = []openai.ChatCompletionChoice{{Message: msg, FinishReason: finish}}
	if out.Usage.TotalTokens == 0 {
		out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	}
	return out, nil
}

// ---- Retry-After ----

// MaxRetryAfter caps how long a Retry-After header makes the executor wait.
const MaxRetryAfter = 60 * time.Second

type retryAfterKey struct{}

// retryAfterBox carries the Retry-After of a failed response from the
// transport (go-openai's errors do not keep headers) to the retry loop.
type retryAfterBox struct {
	mu sync.Mutex
	d  time.Duration
	ok bool
}

func (b *retryAfterBox) set(d time.Duration) {
	b.mu.Lock()
	b.d, b.ok = d, true
	b.mu.Unlock()
}

func (b *retryAfterBox) take() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.d, b.ok
	b.d, b.ok = 0, false
	return d, ok
}

// retryAfterTransport records the Retry-After of 429 and 5xx answers in
// the request context's box.
type retryAfterTransport struct{ base http.RoundTripper }

func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		if box, ok := req.Context().Value(retryAfterKey{}).(*retryAfterBox); ok {
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				box.set(d)
			}
		}
	}
	return resp, err
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP
// date. The wait is capped at MaxRetryAfter; a date in the past is 0.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return min(max(d, 0), MaxRetryAfter), true
	}
	return 0, false
}
