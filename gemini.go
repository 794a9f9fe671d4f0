package main

import "context"

func (m *modelService) geminiChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	return nil, errorf(codeNotImplemented, "gemini adapter has not landed yet")
}
func (m *modelService) geminiModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	return nil, nil, errorf(codeNotImplemented, "gemini adapter has not landed yet")
}
