"""TSDAE's decoder (Wang, Reimers & Gurevych, 2021): a training-only head that rebuilds the original sentence
from the sentence embedding of its corrupted copy.

It is the encoder's own architecture as a causal LM (transformers' *ForCausalLM: is_decoder, with
cross-attention) whose transformer *is* the encoder's: every weight the two share by name is one tensor, the
token embeddings and the output projection included; only the cross-attention is new, and the LM head starts
as a copy of the encoder's masked-LM head (`tie=False`: the transformer is a copy too, and only the
embedding matrix is shared). This is the tied setting of the paper and of its implementation,
sentence-transformers' DenoisingAutoEncoderLoss (`tie_encoder_decoder=True`, its default): the decoder's
self-attention and feed-forward gradients train the encoder too. Its cross-attention's memory is the
sentence embedding alone, a sequence of length 1: the decoder sees nothing else of the encoder, so the
embedding has to carry the sentence (the paper's bottleneck, section 3). It lives beside the encoder in the
trained SpanEncoder and is never exported (pipeline.model.transformer.export saves the encoder only).
"""

from __future__ import annotations

import copy
import functools

from pipeline.errors import InputError


def decoder_config(encoder_config):
    """The encoder's configuration as a decoder's; a copy, so the exported encoder's config.json stays an encoder's."""
    config = copy.deepcopy(encoder_config)
    config.is_decoder, config.add_cross_attention = True, True
    return config


@functools.cache
def decoder_class() -> type:
    """TsdaeDecoder, the class, defined at its first use: torch and transformers load then, not when the config
    imports TSDAE's objective (pipeline.objectives.tsdae, which imports this module at its top)."""
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM

    class TsdaeDecoder(nn.Module):
        """`forward(embedding, ids, mask)`: the decoder's next-token logits for the original sentences `ids`
        ([CLS]/<s> ... [SEP]/</s>, right-padded; `mask` their attention mask), read with teacher forcing: position t
        sees tokens 0..t and the embedding, and predicts token t + 1. So logits[:, t] scores ids[:, t + 1]."""

        def __init__(self, mlm_model: nn.Module, seed: int = 0, tie: bool = True):
            super().__init__()
            # Its own RNG for the new cross-attention weights, which neither depend on nor move the caller's draws.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                try:
                    self.model = AutoModelForCausalLM.from_config(decoder_config(mlm_model.config))
                except ValueError:
                    raise InputError(
                        f"tsdae: {type(mlm_model).__name__} has no causal-LM form with cross-attention "
                        "for TSDAE's decoder; use a BERT- or RoBERTa-family model"
                    ) from None
            loaded = self.model.load_state_dict(mlm_model.state_dict(), strict=False)
            foreign = [k for k in loaded.missing_keys if ".crossattention." not in k] + loaded.unexpected_keys
            if foreign:
                raise InputError(
                    f"tsdae: the decoder built from {type(mlm_model).__name__} does not take its weights "
                    f"({len(foreign)} differ, e.g. {foreign[0]}); use a BERT- or RoBERTa-family model"
                )
            encoder = dict(mlm_model.base_model.named_parameters()) if tie else {}
            for name, _ in list(self.model.base_model.named_parameters()):
                if name in encoder:
                    module, _, attr = name.rpartition(".")
                    setattr(self.model.base_model.get_submodule(module), attr, encoder[name])
            self.model.set_input_embeddings(mlm_model.get_input_embeddings())
            self.model.get_output_embeddings().weight = mlm_model.get_input_embeddings().weight

        def forward(self, embedding: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            memory = embedding.unsqueeze(1)  # (rows, 1, hidden): the sentence embedding is all it attends to
            return self.model(
                input_ids=ids[:, :-1],
                attention_mask=mask[:, :-1],
                encoder_hidden_states=memory,
                encoder_attention_mask=mask.new_ones(ids.size(0), 1),
            ).logits

    TsdaeDecoder.__qualname__ = TsdaeDecoder.__name__  # pickle finds it as this module's TsdaeDecoder (__getattr__)
    return TsdaeDecoder


def __getattr__(name: str):
    # `tsdae_decoder.TsdaeDecoder` (and pickle, which looks a class up by module and name) build the class on first use.
    if name == "TsdaeDecoder":
        return decoder_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
