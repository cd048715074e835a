"""Constructed extremal pairs and closed-form suprema of the checked quantities.

The search (:mod:`privaudit.audit.sensitivity.search`) starts from these pairs; the gradient ascent then
moves them to where the model actually realises the extreme embeddings. Every pair is built from the
target's domain (rows of the data pool, inverted, repeated), so it is a valid input of the code the
defense trains with; a pair may carry constructed parameter values (``Pair.params``: every claim is a
bound at every parameter value), which the ascent moves with the inputs and a witness saves.

- :mod:`.suprema` — closed-form suprema with their derivations (DPCL Thms. 1-3, DP-GCL Eq. 8,
  Logit-DP Lemma 4.6 at n = 2) and :data:`SUPREMA`, the table the reports read;
- :mod:`.images` — copies of one image and its antipode (the normalised-representation theorems);
- :mod:`.flip` — replace-one, every unchanged unit's clipped gradient exactly negated: -> 2 (2|B| - 2) C;
- :mod:`.split_flip` — replace-one, plain SimCLR: every view turns, the replaced example's two included:
  -> 4|B|C (DPCL Sec. 3.2.1's bound is tight);
- :mod:`.add_flip` — add-remove: the added example out-pulls a marked one, every unit turns around;
- :mod:`.chunk` — chunked grouping: homogeneous groups in D, mixed in D': -> (K - 1) C;
- :mod:`.group_clip` — Eq. 8: every fixed group turns: -> 2KC, the supremum;
- :mod:`.logit` — Logit-DP at n = 1 -> 2: 2 sqrt(2) (1 - p) C > 2C;
- :mod:`.spreadout` — Logit-DP's spreadout sums at n = 1 -> 2: -> 4C, the supremum;
- :mod:`.heads`, :mod:`.layer_inputs`, :mod:`.angles` — the shared pieces: constructed heads, the layer
  inputs they are fitted to, and the angle search;
- :mod:`.seeds` — the pairs each claim starts from, by the name the register gives.
"""

from privaudit.audit.sensitivity.extremal.add_flip import add_flip_seeds
from privaudit.audit.sensitivity.extremal.angles import SPLIT_MARGIN, evolve_angles
from privaudit.audit.sensitivity.extremal.chunk import chunk_seeds
from privaudit.audit.sensitivity.extremal.flip import flip_seeds
from privaudit.audit.sensitivity.extremal.group_clip import group_clip_limit, group_clip_ratio, group_clip_seeds
from privaudit.audit.sensitivity.extremal.heads import (HEAD_SHAPES, SPLIT_SHAPES, SPLIT_TOLERANCE, aligned_head,
                                                        antipodal_head, label_head, split_flip_head)
from privaudit.audit.sensitivity.extremal.images import image_seeds
from privaudit.audit.sensitivity.extremal.layer_inputs import last_layer_inputs
from privaudit.audit.sensitivity.extremal.logit import LOGIT_ANGLES, logit_seeds
from privaudit.audit.sensitivity.extremal.seeds import (gradient_seeds, group_clip_pairs, plain_simclr_seeds,
                                                        spreadout_pairs)
from privaudit.audit.sensitivity.extremal.split_flip import (SPLIT_TORQUE_FLOOR, split_flip_angles, split_flip_ratio,
                                                             split_flip_rows, split_flip_seeds)
from privaudit.audit.sensitivity.extremal.spreadout import SPREADOUT_ANGLES, spreadout_seeds
from privaudit.audit.sensitivity.extremal.suprema import (SUPREMA, group_clip_supremum, mean_supremum,
                                                          similarity_supremum, spreadout_supremum, sse_supremum)

__all__ = ["HEAD_SHAPES", "LOGIT_ANGLES", "SPLIT_MARGIN", "SPLIT_SHAPES", "SPLIT_TOLERANCE", "SPLIT_TORQUE_FLOOR",
           "SPREADOUT_ANGLES", "SUPREMA", "add_flip_seeds", "aligned_head", "antipodal_head", "chunk_seeds",
           "evolve_angles", "flip_seeds", "gradient_seeds", "group_clip_limit", "group_clip_pairs",
           "group_clip_ratio", "group_clip_seeds", "group_clip_supremum", "image_seeds", "label_head",
           "last_layer_inputs", "logit_seeds", "mean_supremum", "plain_simclr_seeds", "similarity_supremum",
           "split_flip_angles", "split_flip_head", "split_flip_ratio", "split_flip_rows", "split_flip_seeds",
           "spreadout_pairs", "spreadout_seeds", "spreadout_supremum", "sse_supremum"]
