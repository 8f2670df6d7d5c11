"""The engine's KV cache: transformers' ``DynamicCache`` with layers that append in place and roll back
by moving their end."""
from __future__ import annotations

import functools
import torch


def new_kv_cache(config: object) -> object:
    """A transformers ``DynamicCache`` whose full-attention layers append in place (``GrowingLayer``):
    each forward copies only its new keys/values instead of re-concatenating the whole cache, and a
    rollback only moves the end. Same tensors, same values, same API (``crop`` takes a negative n)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer
    cache = DynamicCache(config=config)
    cache.layers = [_growing_layer_class()() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type:
    """Built on first use so that importing the engine does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """keys/values are views of the first ``length`` rows of a buffer with spare room (doubled when
        full). Private to this engine: beam-search reordering and offloading are not supported."""
        _layer_type = None  # never registered as transformers' default layer

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf = self._vbuf = None
            self._len = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._len + key_states.shape[-2]
            if self._kbuf is None or end > self._kbuf.shape[-2]:
                self._kbuf, self._vbuf = self._grown(self._kbuf, key_states, end), self._grown(self._vbuf, value_states, end)
            self._kbuf[..., self._len:end, :].copy_(key_states)
            self._vbuf[..., self._len:end, :].copy_(value_states)
            self._len = end
            self.keys, self.values = self._kbuf[..., :end, :], self._vbuf[..., :end, :]
            return self.keys, self.values

        def _grown(self, buf: torch.Tensor | None, states: torch.Tensor, needed: int) -> torch.Tensor:
            new = states.new_empty((*states.shape[:-2], max(2 * needed, 64), states.shape[-1]))
            if buf is not None and self._len:
                new[..., :self._len, :].copy_(buf[..., :self._len, :])
            return new

        def crop(self, tokens_to_remove: int) -> None:
            super().crop(tokens_to_remove)         # checks the sign, shortens the views
            if self.is_initialized:
                self._len = self.keys.shape[-2]

        def reset(self) -> None:
            super().reset()
            self._kbuf = self._vbuf = None
            self._len = 0

    return GrowingLayer
