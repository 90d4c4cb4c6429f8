"""Models written as a user writes them (``@relay.adt``, ``@relay_model``, ``@relay``): the
NLP workloads of the 2019 Relay paper.

- `tree_lstm`: a binary TreeLSTM (Tai et al. 2015) over Stanford Sentiment Treebank trees.
- `char_rnn`: the PyTorch tutorial's character-level name generator, and recurrent
  (RNN, GRU, LSTM) encoders over sequences.
"""
