package main

import "context"

func (m *modelService) anthropicChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	return nil, errorf(codeNotImplemented, "anthropic adapter has not landed yet")
}
func (m *modelService) anthropicModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	return nil, nil, errorf(codeNotImplemented, "anthropic adapter has not landed yet")
}
