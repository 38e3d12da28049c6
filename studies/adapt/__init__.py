"""Encoder adaptation for sparse attention (``attnkit adapt``): is the adapted encoder faithful and as accurate as softmax?"""
