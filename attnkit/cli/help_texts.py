"""The long help texts of the command line's commands (``attnkit <command> --help``)."""

PRETRAIN_DOC = """MiniBERT on a task's own text.

``attnkit pretrain --task semeval2013 --kind ssa`` trains a lower-cased WordPiece tokenizer on the task's **training**
texts only (never dev/test), then pre-trains a MiniBERT with the masked-language-model objective on those same texts
(15% of tokens chosen; of those 80% [MASK], 10% a random token, 10% kept), and writes ``<output-dir>/model`` (model +
tokenizer) and ``<output-dir>/metrics.json``. ``attnkit train --model <that folder>`` fine-tunes it.
"""

WORDS_DOC = """The most-attended words per predicted class over a dataset split.

The attention a word receives in a sentence is the column sum of the attention matrix over the real query tokens,
averaged over layers and heads, summed over the word's pieces ([CLS]/[SEP] left out of the ranking). Each sentence is
classified; each word occurrence adds its received attention to its lower-cased form under the predicted class. Words
are ranked per class by the mean per occurrence, among words seen at least --min-count times in that class.
"""

FAITHFULNESS_DOC = """Faithfulness and plausibility of a classifier's explanations (ERASER, DeYoung et al. 2020).

Each text's words (whitespace-separated; word pieces summed per word) are ranked by each explanation: the [CLS] row
of the last layer's attention (mean over heads), attention rollout, the attention each word receives, gradient x
input and integrated gradients (captum), and a random ranking. For k = 1, 5, 10, 20, 50% of the words:
comprehensiveness = p(predicted class) minus p after removing the top k% words (higher: more faithful), sufficiency
= p minus p with only those words (lower: more faithful); AOPC = the mean over k. Also Kendall's tau between the
attention and gradient rankings, and, on sst2-ptb, plausibility: the average precision of each ranking against
the words whose own SST label carries the sentence's sentiment.

A sparse last layer also gives a hard rationale: the words its [CLS] row attends to (an exact zero leaves a word
out), as many as the model chose for each text. Comprehensiveness and sufficiency of that rationale, and on sst2-ptb
its token F1 and IOU against SST's marked words, are reported beside gradient x input's, integrated gradients' and
a random ranking's top words at the same length. --rationale-lengths REPORT measures another model (a softmax one)
at the lengths of that report's rationales, text by text:

  attnkit faithfulness --model runs/recipe --output recipe.json
  attnkit faithfulness --model runs/softmax --rationale-lengths recipe.json --output softmax.json
"""

DESCRIPTION = """The attnkit command: train, sweep, evaluate, predict, explain.

"attnkit train" with no arguments fine-tunes the bundled MiniLM with sparsegen-lin
attention on the Rotten Tomatoes snippets, offline.
"""

ADAPT_DOC = """Continued masked-LM pre-training of an encoder for a sparse attention map (AdaSplash's recipe), before
fine-tuning: the encoder learns to work with the map, so that fine-tuning it with that map need not cost accuracy.

  attnkit adapt --task sst2-ptb --attention entmax15 --max-steps 2 --output-dir a
  attnkit train --task sst2-ptb --model a --attention entmax15 ...

Texts: the TRAINING split of every --task (never dev or test), and --text-file files (one text per line); exact
duplicates dropped. The map is annealed from (nearly) softmax to the target over --anneal of the steps: alpha from
1.01 to 1.5 (entmax15) or --alpha (entmax-alpha); the temperature 1 - lam from 8x to 1x (sparsegen-lin, sparsemax).
--attention softmax is the control: the same texts, steps and schedule. An encoder without an MLM head (the bundled
all-MiniLM-L6-v2) gets a new one (tied to the input embeddings). <output-dir>/model is the adapted encoder (the MLM
head dropped); its run_info.json records how it was adapted."""
