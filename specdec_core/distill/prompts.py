"""Prompt sets for training and measuring the bundled draft: made here, from templates × topics.

The training set and the held-out set share neither a template nor a topic, so the acceptance measured
on the held-out set says how the draft does on chat prompts it never saw (not on paraphrases of them).
Both lists are built by a seeded shuffle: the same seed gives the same prompts in the same order.
"""
from __future__ import annotations

import random

TRAIN_TEMPLATES = (
    "Explain {t} to a ten-year-old.",
    "What is {t}?",
    "Give me three tips about {t}.",
    "Write a short story about {t}.",
    "Write a haiku about {t}.",
    "What are the pros and cons of {t}?",
    "How does {t} work?",
    "Summarize the history of {t} in a few sentences.",
    "Write a friendly email to a colleague about {t}.",
    "List five interesting facts about {t}.",
    "Why do people care about {t}?",
    "Describe {t} in one paragraph.",
    "What is a common misconception about {t}?",
    "How would you teach a beginner about {t}?",
    "Write a short poem about {t}.",
    "Give a step-by-step guide to getting started with {t}.",
    "What questions should I ask an expert on {t}?",
    "Compare {t} with something from everyday life.",
    "Write a tweet about {t}.",
    "What are the main challenges related to {t}?",
    "Can you recommend how to learn more about {t}?",
    "Tell me a fun fact about {t}.",
    "Write a product description inspired by {t}.",
    "What would the world look like without {t}?",
    "Write a dialogue between two friends discussing {t}.",
    "Explain the basic vocabulary of {t}.",
    "What mistakes do beginners make with {t}?",
    "Write a motivational message that mentions {t}.",
    "How has {t} changed in the last fifty years?",
    "Give me a quiz with three questions about {t}.",
    "Write an outline for a presentation on {t}.",
    "I am curious about {t}. Where should I start?",
    "What is the future of {t}?",
    "Explain {t} using an analogy.",
    "Write a limerick about {t}.",
    "What skills are useful for working with {t}?",
)

TRAIN_TOPICS = (
    "photosynthesis", "the moon", "volcanoes", "the internet", "chess", "coffee", "bicycles", "rainbows",
    "honey bees", "the Roman Empire", "electric cars", "gardening", "jazz music", "the human heart",
    "recycling", "dinosaurs", "clouds", "the printing press", "yoga", "saving money", "time management",
    "the ocean", "penguins", "bread baking", "football", "democracy", "solar panels", "libraries",
    "friendship", "mountains", "machine learning", "the water cycle", "vaccines", "trains", "origami",
    "the stock market", "sleep", "meditation", "deserts", "earthquakes", "the piano", "public speaking",
    "cats", "dogs", "the Olympic Games", "chocolate", "rivers", "spices", "the Renaissance", "robots",
    "climate change", "cooking pasta", "video games", "birds migrating", "the immune system", "glaciers",
    "wind energy", "photography", "learning a language", "the solar system", "bridges", "newspapers",
    "running a marathon", "ancient Egypt", "tea", "forests", "smartphones", "the alphabet", "mathematics",
    "the weather", "museums", "airplanes", "hiking", "vitamins", "the brain", "poetry", "board games",
    "the French Revolution", "magnets", "coral reefs", "cybersecurity", "kindness", "city parks",
    "the periodic table", "bees and flowers", "painting", "opera", "submarines", "fungi", "the Arctic",
    "budget travel", "email etiquette", "teamwork", "the telescope", "knitting", "camping", "elephants",
    "black holes", "electricity", "Shakespeare", "fast food", "online privacy", "3D printing", "tides",
    "the Great Wall of China", "soap", "running a small business", "volunteering", "grammar", "gravity",
    "wolves", "the violin", "skyscrapers", "comic books", "tornadoes", "composting", "emojis",
)

HELDOUT_TEMPLATES = (
    "I'd love to hear your thoughts on {t}.",
    "Could you write a paragraph that introduces {t}?",
    "What should everyone know about {t}?",
    "Pretend you are a tour guide and talk about {t}.",
    "Please explain why {t} matters today.",
    "Write a short blog post about {t}.",
)

HELDOUT_TOPICS = (
    "butterflies", "lighthouses", "the cello", "snowflakes", "podcasts", "pottery",
    "the Sahara", "octopuses", "submarine cables", "public transport", "snails", "the Amazon rainforest",
    "handwriting", "kites", "street food", "sunflowers",
)


N_TRAINING_PROMPTS = len(TRAIN_TEMPLATES) * len(TRAIN_TOPICS)


def _pairs(templates: tuple[str, ...], topics: tuple[str, ...], n: int, seed: int) -> list[str]:
    pairs = [tpl.format(t=topic) for tpl in templates for topic in topics]
    random.Random(seed).shuffle(pairs)
    return pairs[:n]


def training_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` training prompts (at most len(TRAIN_TEMPLATES) × len(TRAIN_TOPICS))."""
    return _pairs(TRAIN_TEMPLATES, TRAIN_TOPICS, n, seed)


def heldout_prompts(n: int, seed: int = 1) -> list[str]:
    """``n`` held-out prompts: templates and topics that never occur in training."""
    return _pairs(HELDOUT_TEMPLATES, HELDOUT_TOPICS, n, seed)
