"""A tokenizer-like preprocessor for Triton's Python backend: BYTES text in, token ids out.

Written exactly as Triton's documentation writes Python models (``pb_utils`` helpers, one
response per request), so the same file runs on Triton and on Conch. The "vocabulary" is a hash
(CRC32) of each lower-cased word, so the model needs no files and gives the same ids everywhere.
"""

import json
import re
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

CLS, SEP, PAD = 101, 102, 0
VOCAB_SIZE = 30522
FIRST_WORD_ID = 1000
WORD = re.compile(r"\w+|[^\w\s]")


def tokenize(text, max_length):
    """Token ids ([CLS] words... [SEP], padded with 0) and the normalised text of one string."""
    words = WORD.findall(text.lower())
    ids = [CLS]
    for word in words[: max_length - 2]:
        ids.append(FIRST_WORD_ID + zlib.crc32(word.encode("utf-8")) % (VOCAB_SIZE - FIRST_WORD_ID))
    ids.append(SEP)
    ids += [PAD] * (max_length - len(ids))
    return ids, " ".join(words)


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        self.max_length = int(model_config["parameters"]["max_length"]["string_value"])
        ids_config = pb_utils.get_output_config_by_name(model_config, "TOKEN_IDS")
        self.ids_dtype = pb_utils.triton_string_to_numpy(ids_config["data_type"])
        pb_utils.Logger.log_info(f"tokenizer ready, max_length={self.max_length}")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            rows = text.reshape(-1)
            ids = np.zeros((len(rows), self.max_length), dtype=self.ids_dtype)
            normalized = np.empty(len(rows), dtype=np.object_)
            for i, raw in enumerate(rows):
                row_ids, words = tokenize(raw.decode("utf-8", "replace"), self.max_length)
                ids[i] = row_ids
                normalized[i] = words.encode("utf-8")
            out_ids = pb_utils.Tensor("TOKEN_IDS", ids.reshape((*text.shape[:-1], self.max_length)))
            out_text = pb_utils.Tensor("NORMALIZED", normalized.reshape(text.shape))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_ids, out_text]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("tokenizer: cleaning up")
