"""The benchmark's prompts: three extractive (copy a passage, a function, a list: prompt lookup's home
ground) and two open-ended (what a chat draft learnt), each named and tagged with its kind."""
from __future__ import annotations

from .measure import BenchPrompt

_PASSAGE = ("The lighthouse on the northern cape was built in 1871 from granite quarried on the island "
            "itself. Its lamp burned paraffin until 1923, when a diesel generator was installed, and the "
            "last resident keeper left in 1989. Today the tower is automated, the keeper's cottage is a "
            "small museum, and the path from the harbour to the cape takes about forty minutes on foot.")
_CODE = ("def merge_sorted(left, right):\n"
         "    result = []\n"
         "    i = j = 0\n"
         "    while i < len(left) and j < len(right):\n"
         "        if left[i] <= right[j]:\n"
         "            result.append(left[i])\n"
         "            i += 1\n"
         "        else:\n"
         "            result.append(right[j])\n"
         "            j += 1\n"
         "    result.extend(left[i:])\n"
         "    result.extend(right[j:])\n"
         "    return result\n")
_LIST = ("Monday: water the tomatoes and check the greenhouse vents.\n"
         "Tuesday: order more seed trays and potting compost.\n"
         "Wednesday: repair the fence by the compost heap.\n"
         "Thursday: harvest the beans and freeze half of them.\n"
         "Friday: clean the tools and sharpen the secateurs.")

PROMPTS: tuple[BenchPrompt, ...] = (
    BenchPrompt("copy-passage", "extractive", "Repeat the following text exactly, word for word:\n\n" + _PASSAGE),
    BenchPrompt("copy-code", "extractive", "Repeat this Python function exactly:\n\n" + _CODE),
    BenchPrompt("copy-list", "extractive", "Repeat this list exactly, line by line:\n\n" + _LIST),
    BenchPrompt("story", "open-ended", "Write a short story about a robot who learns to paint."),
    BenchPrompt("explain", "open-ended", "Explain how a refrigerator keeps food cold."),
)
QUICK_PROMPTS = ("copy-passage", "story")
