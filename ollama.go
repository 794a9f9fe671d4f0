package main

import "context"

func (m *modelService) ollamaChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	return nil, errorf(codeNotImplemented, "ollama adapter has not landed yet")
}
func (m *modelService) ollamaModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	return nil, nil, errorf(codeNotImplemented, "ollama adapter has not landed yet")
}
