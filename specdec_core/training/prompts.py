"""Prompt sets for training and measuring the bundled draft: made here, from templates × topics and whole
chat prompts.

Training draws from two pools. The narrow pool is every pair of ``TRAIN_TEMPLATES`` × ``TRAIN_TOPICS``
(4,212 prompts, what the token-only draft was trained on). The broad pool (the default) adds
``BROAD_TEMPLATES`` and ``BROAD_TOPICS`` (questions, requests, casual and task forms; topics from daily life
to science) and ``STANDALONE_PROMPTS``: a draft trained on the narrow pool agreed with the target clearly
less on free-form chat prompts than on held-out template prompts (docs/trained-drafts.md, "The prompt pool").

The held-out set is ``FREEFORM_HELDOUT`` (whole chat prompts written apart from every training list)
interleaved with pairs of ``HELDOUT_TEMPLATES`` × ``HELDOUT_TOPICS``, which share neither a template nor a
topic with training: the acceptance measured on it says how the draft does on chat prompts it never saw.
Every list is built by a seeded shuffle: the same seed gives the same prompts in the same order.
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


BROAD_TEMPLATES = (  # other forms: questions, requests, casual, tasks
    "Can you tell me about {t}?",
    "I'm new to {t}. Where do I begin?",
    "My friend keeps talking about {t}. What is it all about?",
    "Write a short speech about {t}.",
    "What's the most surprising thing about {t}?",
    "Help me understand {t} in simple words.",
    "Give me a short summary of {t}.",
    "What are some good questions to discuss about {t} in class?",
    "Write a children's story about {t}.",
    "What do experts disagree about when it comes to {t}?",
    "How can {t} make everyday life better?",
    "Give me a fun activity for kids related to {t}.",
    "Write a short news report about {t}.",
    "What are the most important facts about {t}?",
    "Explain {t} as if I were a complete beginner.",
    "Could you give me some advice about {t}?",
    "What is the best way to explain {t} to my grandparents?",
    "Write a funny short paragraph about {t}.",
    "Describe a day in the life of someone who works with {t}.",
    "What are the benefits of {t}?",
    "What are the risks of {t}?",
    "Tell me something most people don't know about {t}.",
    "Write a review of a book about {t}.",
    "Give me a list of words related to {t}.",
    "How do scientists study {t}?",
    "Write a letter to a friend describing {t}.",
    "Make a short plan for a school project on {t}.",
    "What are the key ideas behind {t}?",
    "how does {t} actually work",
    "tell me about {t} please",
    "Quick question: what's the deal with {t}?",
    "Write a journal entry about a first experience with {t}.",
    "Give me two arguments for and two against {t}.",
    "Explain {t} in three sentences.",
    "What would a beginner's checklist for {t} look like?",
    "Why is {t} important?",
    "Describe {t} to someone who has never heard of it.",
    "Write a riddle about {t}.",
    "What careers are connected to {t}?",
    "Share some myths and facts about {t}.",
    "What can children learn from {t}?",
    "Write a short conversation between a teacher and a student about {t}.",
    "What is the science behind {t}?",
    "Give me a short history lesson on {t}.",
    "If you could change one thing about {t}, what would it be?",
    "Write the opening paragraph of an essay about {t}.",
    "What should I know before I get into {t}?",
    "List some dos and don'ts for {t}.",
    "How is {t} different around the world?",
    "Write a song verse about {t}.",
    "Can you give me an example that shows how {t} works?",
    "What are three things you find fascinating about {t}?",
    "Write an encouraging note to someone who is struggling with {t}.",
    "Please describe the main parts of {t}.",
    "Tell me a short anecdote involving {t}.",
    "Write a short advertisement for a class about {t}.",
    "Explain the pros and cons of {t} for families.",
    "How do you think {t} will change in the next ten years?",
    "Give me a simple definition of {t}, then an example.",
    "I have a test about {t} tomorrow. Can you help me review?",
    "What are the ethical questions around {t}?",
    "Write a short fable that teaches a lesson about {t}.",
    "Explain the connection between {t} and nature.",
    "What tools or materials do you need for {t}?",
    "Write a short FAQ about {t}.",
    "Tell me how {t} affects our health.",
    "Why might someone be afraid of {t}?",
    "Describe {t} using only simple words.",
    "Write an invitation to an event about {t}.",
    "What are some common questions people ask about {t}?",
)

BROAD_TOPICS = (  # from daily life to science
    "the history of tea ceremonies", "quantum computers", "the Industrial Revolution", "ice cream", "owls",
    "the Eiffel Tower", "renewable energy", "first aid", "the human skeleton", "sharks", "chemistry", "vinegar",
    "the Vikings", "ballet", "cryptocurrency", "a healthy breakfast", "public libraries in small towns",
    "electric guitars", "the Moon landing", "rainy days", "the Milky Way", "fire safety", "the ancient Greeks",
    "wildflowers", "weightlifting", "podcasting equipment", "salt", "bamboo", "frogs", "the Pacific Ocean",
    "cheese making", "sign language", "nuclear power", "the Silk Road", "hot air balloons", "typewriters",
    "the Great Barrier Reef", "online shopping", "memory", "habits", "procrastination", "happiness", "anger",
    "curiosity", "honesty", "patience", "creativity", "leadership", "negotiation", "job interviews",
    "writing a resume", "moving to a new city", "starting a podcast", "learning to swim", "learning to drive",
    "home workouts", "healthy snacks", "baking cookies", "making soup", "rice",
    "potatoes", "apples", "bananas", "strawberries", "olive oil", "pizza", "sushi", "tacos", "curry",
    "pancakes", "sandwiches", "salads", "smoothies", "breakfast cereals", "coffee shops", "restaurants",
    "farmers markets", "supermarkets", "kitchen safety", "dishwashers", "washing machines", "microwaves",
    "the light bulb", "the telephone", "radio", "television", "the camera", "the wheel", "the compass",
    "clocks", "calendars", "maps", "satellites", "rockets", "space stations", "Mars", "Jupiter", "Saturn's rings",
    "comets", "eclipses", "stars", "the Sun", "northern lights", "thunderstorms", "hurricanes", "floods",
    "droughts", "fog", "snow days", "spring", "summer holidays", "winter sports", "skiing", "ice skating",
    "surfing", "sailing", "fishing", "kayaking", "rock climbing", "basketball", "baseball",
    "cricket", "golf", "boxing", "swimming", "cycling races", "chess tournaments", "marathon training",
    "sports injuries", "stretching", "posture", "healthy eating", "sugar", "caffeine",
    "allergies", "the common cold", "headaches", "dentists", "hospitals", "nurses", "doctors", "pharmacies",
    "exercise for older adults", "mental health", "loneliness", "gratitude", "journaling", "minimalism",
    "decluttering", "house plants", "succulents", "roses", "trees", "oak trees", "seeds", "soil", "worms",
    "ants", "spiders", "butterfly gardens", "beetles", "bats", "whales", "dolphins", "seals", "turtles",
    "snakes", "lizards", "parrots", "eagles", "chickens", "cows", "horses", "sheep", "goats",
    "pigs", "rabbits", "hamsters", "goldfish", "pet care", "adopting a pet", "zoos", "national parks",
    "endangered species", "pollution", "plastic waste", "air quality", "clean water", "electric bikes",
    "self-driving cars", "traffic", "road safety", "airports", "ships", "canals", "tunnels", "highways",
    "city planning", "architecture", "castles", "pyramids", "temples", "cathedrals", "old houses", "tiny houses",
    "interior design", "furniture", "carpentry", "plumbing", "painting a room", "home repairs", "tools",
    "sewing", "fashion", "shoes", "hats", "uniforms", "jewelry", "perfume", "soap making", "candles",
    "clay sculpting", "sculpture", "drawing", "watercolors", "cartoons", "animation", "movies", "theater",
    "musicals", "orchestras", "drums", "the flute", "singing", "choirs", "hip hop", "rock music",
    "classical music", "folk songs", "dance", "circus", "magic tricks", "puzzles", "crosswords", "sudoku",
    "card games", "toys", "Lego", "paper airplanes", "fairy tales", "myths", "legends", "dragons", "superheroes",
    "science fiction", "mystery novels", "poetry slams", "libraries and e-books", "reading habits",
    "writing a novel", "blogging", "journalism", "social media", "online games", "programming", "Python",
    "websites", "computer viruses", "passwords", "artificial intelligence", "chatbots", "data privacy",
    "cloud storage", "email", "video calls", "remote work", "office life", "meetings",
    "deadlines", "teamwork at school", "homework", "exams", "studying", "teachers", "universities",
    "scholarships", "student loans", "budgeting", "taxes", "banks", "investing", "insurance",
    "buying a house", "renting an apartment", "neighbors", "community gardens", "charity", "elections",
    "laws", "courts", "the police", "firefighters", "the army", "peace", "human rights", "immigration",
    "languages of the world", "dialects", "translation", "writing systems", "numbers", "fractions",
    "geometry", "algebra", "statistics", "probability", "logic", "philosophy", "ethics", "religion and art",
    "world history", "the Middle Ages", "knights", "samurai", "the Aztecs", "the Incas", "ancient China",
    "ancient Rome's roads", "the Cold War", "the space race", "explorers", "Columbus", "Marco Polo",
    "inventors", "famous scientists", "Albert Einstein", "Marie Curie", "Isaac Newton", "Charles Darwin",
    "evolution", "genetics", "DNA", "cells", "bacteria", "viruses", "microscopes", "atoms", "the speed of light",
    "sound", "heat", "energy", "friction", "batteries", "circuits", "engines", "steam engines", "magnetism",
    "oil", "coal", "natural gas", "water power", "recycling paper", "glass", "metals", "gold", "diamonds",
    "rocks and minerals", "fossils", "caves", "islands", "mountain lakes", "waterfalls", "canyons", "beaches",
    "Antarctica", "Africa", "Asia", "Europe", "South America", "Australia", "Japan", "India", "Brazil",
    "Canada", "Mexico", "Italy", "Egypt's Nile", "Paris", "London", "New York", "Tokyo", "small villages",
    "farming", "tractors", "wheat", "corn", "bees and honey", "orchards", "vineyards", "fishing boats",
    "holidays", "festivals", "traditions", "family dinners", "grandparents",
    "siblings", "parenting", "babies", "teenagers", "growing older", "retirement", "hobbies", "collecting stamps",
    "bird watching", "stargazing", "walking", "travel packing", "road trips", "train journeys", "hotels",
    "camping gear", "maps and navigation", "souvenirs", "postcards", "letters", "gift giving", "manners",
    "apologizing", "making friends", "conflict at work", "confidence", "motivation",
    "goal setting", "failure", "success", "luck", "time zones", "morning routines",
)

STANDALONE_PROMPTS = (
    "Why do cats purr?", "How do I boil an egg?", "What makes a good friend?",
    "How many hours of sleep does an adult need?", "What is the tallest mountain in the world?",
    "How do I write a good thank-you email?", "What should I pack for a beach holiday?",
    "Why do we have seasons?", "How do bees make honey?", "What is the difference between weather and climate?",
    "How can I save money on groceries?", "Write a short poem about the sea.", "Tell me a bedtime story.",
    "How do I keep my houseplants alive?", "What are some easy dinner recipes?", "Why is exercise good for you?",
    "How do I change a flat tire?", "What is a black hole?", "How do computers store information?",
    "What is the best way to learn new words?", "How do I calm down before an exam?",
    "Give me ideas for a rainy afternoon.", "What are some fun things to do in the summer?",
    "How does the internet reach my house?", "What is the difference between a lake and a pond?",
    "Why do we yawn?", "How do fish breathe underwater?", "What is a good name for a bakery?",
    "Write a limerick about a lazy dog.", "What are some tips for a first job interview?",
    "How do I make new friends in a new city?", "Explain what a noun is.", "What causes rain?",
    "How do I start running?", "What are healthy foods for breakfast?", "How do magnets work?",
    "Why do people snore?", "Write a short story about a lost key.", "What is photosynthesis in simple words?",
    "How do I organize my desk?", "Write a birthday message for my sister.", "Why is the ocean salty?",
    "What do astronauts eat?", "How do I make my own pizza dough?", "What are the colors of the rainbow?",
    "How can I be more patient?", "What should I do if I feel lonely?", "Write a haiku about the morning.",
    "Explain how a bicycle works.", "What is the history of chocolate?", "How do trains run on tracks?",
)

FREEFORM_HELDOUT = (
    "Tell me about the causes of the First World War.",
    "What are some tips for staying productive when working from home?",
    "Write a short poem about autumn leaves.", "How do I make a good cup of coffee at home?",
    "Can you explain how a credit score works?", "What's the difference between a virus and a bacterium?",
    "Plan a three-day trip to Rome for me.", "Why is the sky blue?",
    "Give me some ideas for a birthday party for a seven-year-old.", "How can I improve my sleep?",
    "Write a cover letter for a job as a barista.", "What are the benefits of drinking water?",
    "Describe your ideal weekend.", "How do airplanes stay in the air?", "What should I cook for dinner tonight?",
    "Explain the rules of tennis.", "Write a story about a robot who learns to paint.", "What is the meaning of life?",
    "How do I start learning to play the guitar?", "What are good habits for a healthy life?",
    "Summarize the plot of Romeo and Juliet.", "How does a refrigerator keep food cold?",
    "Suggest a name for my new puppy.", "What is inflation and why does it happen?",
    "Write a thank-you note to my teacher.", "How do I deal with stress at work?",
    "What are the planets in our solar system?", "Tell me a joke about computers.", "How can I be a better listener?",
    "What happens when we dream?", "Write an apology message to a friend I forgot to call.",
    "How do vaccines protect us?", "What is the difference between a crocodile and an alligator?",
    "Write a short mystery story set on a train.", "How should I prepare for a long hike?",
    "What are the main ideas of stoicism?", "Give me a weekly meal plan on a small budget.",
    "Why do some people become vegetarian?", "How do noise-cancelling headphones work?",
    "What makes a city good to live in?", "Write a welcome message for new members of a book club.",
    "How do I politely say no to extra work?", "What is the history of the bicycle?",
    "Describe the water in a mountain stream.", "Can you explain what a spreadsheet formula is?",
    "What are some good exercises for back pain?", "Write a short speech for my best friend's wedding.",
    "Why do we celebrate New Year?",
)


N_TRAINING_PROMPTS = len(TRAIN_TEMPLATES) * len(TRAIN_TOPICS)   # the narrow pool's size; the default count


def _pairs(templates: tuple[str, ...], topics: tuple[str, ...], seed: int) -> list[str]:
    pairs = [tpl.format(t=topic) for tpl in templates for topic in topics]
    random.Random(seed).shuffle(pairs)
    return pairs


def training_prompts(n: int, seed: int = 0, broad: bool = True) -> list[str]:
    """``n`` training prompts. Broad (default): every standalone prompt, then seeded template × topic pairs of
    both pools, shuffled together; narrow: pairs of ``TRAIN_TEMPLATES`` × ``TRAIN_TOPICS`` only."""
    if not broad:
        return _pairs(TRAIN_TEMPLATES, TRAIN_TOPICS, seed)[:n]
    pairs = _pairs(TRAIN_TEMPLATES + BROAD_TEMPLATES, TRAIN_TOPICS + BROAD_TOPICS, seed)
    chosen = list(STANDALONE_PROMPTS) + pairs[:max(n - len(STANDALONE_PROMPTS), 0)]
    random.Random(seed + 1).shuffle(chosen)
    return chosen[:n]


N_HELDOUT_PROMPTS = len(FREEFORM_HELDOUT) + len(HELDOUT_TEMPLATES) * len(HELDOUT_TOPICS)


def heldout_template_pairs(seed: int = 1) -> list[str]:
    """Every pair of ``HELDOUT_TEMPLATES`` × ``HELDOUT_TOPICS``, in the seeded order ``heldout_prompts`` uses."""
    return _pairs(HELDOUT_TEMPLATES, HELDOUT_TOPICS, seed)


def heldout_prompts(n: int, seed: int = 1) -> list[str]:
    """``n`` held-out prompts: free-form chat prompts and template × topic pairs, alternating (seeded order of
    each), then the rest of the longer list. Nothing here occurs in training."""
    free = list(FREEFORM_HELDOUT)
    random.Random(seed).shuffle(free)
    pairs = heldout_template_pairs(seed)
    mixed = [p for pair in zip(free, pairs) for p in pair] + free[len(pairs):] + pairs[len(free):]
    return mixed[:n]
