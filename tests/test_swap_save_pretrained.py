"""A transformers model after gelulab.swap: save_pretrained warns in one line that from_pretrained restores the
model's own activations and names the swap call to repeat; that call, after loading, gives the swapped model back.

References: transformers' own from_pretrained (what the reloaded model holds and computes) and the model as it
was before and after the swap; no download (a tiny BertConfig model built here).
"""
from __future__ import annotations

import io
import warnings

import numpy as np
from conftest import requires

requires("transformers")
import torch
import transformers

import gelulab

IDS = torch.tensor([[1, 5, 9, 2, 0, 7]])


def tiny_bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, hidden_act="gelu")
    return transformers.BertModel(config).eval()


def hidden(model):
    with torch.no_grad():
        return model(IDS).last_hidden_state.numpy()


def saved(model, directory):
    """Warnings of model.save_pretrained(directory), every one recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.save_pretrained(directory)
    return [w for w in caught if "gelulab" in str(w.message)]


def test_save_pretrained_after_swap_warns_once_with_the_call_that_restores_it(tmp_path):
    model = tiny_bert()
    original = hidden(model)
    gelulab.swap(model, to="gelu_sigmoid", impl="formula")
    swapped = hidden(model)
    assert np.abs(swapped - original).max() > 1e-4  # x sigmoid(1.702 x) is not erf's GELU: the swap is visible

    caught = saved(model, tmp_path)
    assert len(caught) == 1 and caught[0].category is UserWarning
    message = str(caught[0].message)
    assert "\n" not in message and str(tmp_path) in message and "GELUActivation" in message
    assert caught[0].filename == __file__  # it points at the save_pretrained line, not at gelulab
    call = "gelulab.swap(model, to={'gelu_none': 'gelu_sigmoid'}, impl='formula')"
    assert call in message

    reloaded = transformers.BertModel.from_pretrained(tmp_path).eval()
    act = reloaded.encoder.layer[0].intermediate.intermediate_act_fn
    assert type(act).__name__ == "GELUActivation"  # what the warning says: the model's own activation
    np.testing.assert_array_equal(hidden(reloaded), original)

    eval(call, {"gelulab": gelulab, "model": reloaded})  # the call the warning names
    np.testing.assert_array_equal(hidden(reloaded), swapped)


def test_the_default_impl_is_left_out_of_the_call(tmp_path):
    model = tiny_bert()
    gelulab.swap(model, to="gelu_tanh")  # computed by the default impl, the framework's own op
    (caught,) = saved(model, tmp_path)
    assert "call gelulab.swap(model, to={'gelu_none': 'gelu_tanh'})" in str(caught.message)
    model = tiny_bert()
    gelulab.swap(model, impl="kernel")  # each activation keeps its variant, computed by gelulab's kernel
    (caught,) = saved(model, tmp_path / "kernel")
    assert "call gelulab.swap(model, to={'gelu_none': 'gelu_none'}, impl='kernel')" in str(caught.message)


def test_no_warning_without_a_swap_or_outside_save_pretrained(tmp_path):
    assert saved(tiny_bert(), tmp_path / "plain") == []
    model = tiny_bert()
    gelulab.swap(model, to="gelu_tanh", impl="formula")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        state = model.state_dict()
        torch.save(state, io.BytesIO())
        buffer = io.BytesIO()
        torch.save(model, buffer)  # the whole module pickles, hook included
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert type(again.encoder.layer[1].intermediate.intermediate_act_fn).__module__ == "gelulab.layers.torch"
    np.testing.assert_array_equal(hidden(again), hidden(model))


def test_swapping_twice_warns_once(tmp_path):
    model = tiny_bert()
    gelulab.swap(model, to="gelu_tanh")
    gelulab.swap(model, to="gelu_sigmoid", impl="formula")
    (caught,) = saved(model, tmp_path)
    message = str(caught.message)
    # the folder holds what the model's code builds (GELUActivation, exact GELU), not the first swap's layer
    assert "own GELUActivation" in message and "to={'gelu_none': 'gelu_sigmoid'}, impl='formula')" in message
