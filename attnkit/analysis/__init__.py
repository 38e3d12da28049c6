"""Looking at what a trained model does.

- :mod:`inference`: batched prediction and evaluation, loading a saved model to run it
- :mod:`explain`: one sentence's attention as heatmaps with sparsity statistics; charts of layer weights, learned
  lam and HANS results
- :mod:`html_view`: an interactive page of every layer and head (support lists, words, means), its CSS and
  JavaScript in :mod:`html_page`
- :mod:`faithfulness`: how faithful and plausible the attention's explanations are
- :mod:`words`: the most-attended words per predicted class over a dataset
"""
