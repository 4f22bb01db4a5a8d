"""Language identification with fastText's lid.176 model (176 languages)."""

from __future__ import annotations

import fasttext

from pipeline.errors import InputError

# lid.176 reaches its decision from a few hundred characters of running text.
# On the 233 State of the Union addresses (46,000 characters on average) the
# first 2,000 characters give the label of the whole document for every one,
# with probability >= 0.93, at 1/30 of the cost; and the filter's documents are
# long (2,048+ tokens), so whole-document prediction would dominate its time.
PREFIX_CHARS = 2000
LABEL_PREFIX = "__label__"
UNKNOWN = ("unknown", 0.0)


class LangIdError(InputError):
    pass


class LanguageIdentifier:
    """Top language and its probability per text, from a fastText supervised model such as lid.176.ftz."""

    def __init__(self, model_path: str):
        try:
            self.model = fasttext.load_model(str(model_path))
        # fastText raises ValueError for a missing or foreign file and
        # MemoryError (std::bad_alloc) for a truncated one.
        except (ValueError, MemoryError) as e:
            raise LangIdError(f"cannot load the fastText language-identification model {model_path}: {e}") from None
        # An unsupervised model (say, the bag-of-words baseline's vectors) loads
        # fine but cannot classify; its "labels" are plain words.
        labels = self.model.get_labels()
        if not labels or not all(label.startswith(LABEL_PREFIX) for label in labels):
            raise LangIdError(f"{model_path} is not a fastText classification model (its labels lack {LABEL_PREFIX!r})")

    def predict(self, texts: list[str]) -> list[tuple[str, float]]:
        """("en", 0.97) per text, in order; ("unknown", 0.0) for a blank text.

        Only the first PREFIX_CHARS characters (after leading whitespace) are
        classified. All texts go to fastText in one call: under numpy 2,
        fastText 0.9.3's predict fails on a single string but works on a list.
        """
        # fastText rejects newlines at inference: it reads one document per line.
        lines = [text.lstrip()[:PREFIX_CHARS].replace("\n", " ") for text in texts]
        asked = [i for i, line in enumerate(lines) if line]
        results = [UNKNOWN] * len(texts)
        if asked:
            labels, probs = self.model.predict([lines[i] for i in asked], k=1)
            for i, label, prob in zip(asked, labels, probs):
                # fastText adds a small epsilon inside its log-probabilities,
                # so a sure prediction can come back as 1.00003.
                results[i] = (label[0].removeprefix(LABEL_PREFIX), min(float(prob[0]), 1.0))
        return results
