"""The embedded demo split: a small encyclopedia and questions written for this project.

The passages summarise well-known, stable facts in our own words; the questions were written against them, some
single-hop (one passage answers) and some two-hop (a bridge entity links two passages, as in HotpotQA). It lets the
env, its tests and the contract suite run without any downloaded data, with an in-process BM25 index.
"""

from __future__ import annotations

__all__ = ["DEMO_PASSAGES", "DEMO_QUESTIONS"]

#: (id, title, text)
DEMO_PASSAGES: tuple[tuple[str, str, str], ...] = (
    ("d01", "Marie Curie",
     "Marie Curie was a Polish-born physicist and chemist who worked in France. She shared the 1903 Nobel Prize in "
     "Physics for research on radioactivity and won the 1911 Nobel Prize in Chemistry for discovering the elements "
     "polonium and radium. She was the first person to win Nobel Prizes in two different sciences."),
    ("d02", "Polonium",
     "Polonium is a rare and highly radioactive chemical element with the symbol Po and atomic number 84. It was "
     "discovered in 1898 and named after Poland, the native country of one of its discoverers."),
    ("d03", "Warsaw",
     "Warsaw is the capital and largest city of Poland. It lies on the Vistula River in east-central Poland. The "
     "city was heavily destroyed during the Second World War and its historic Old Town was later rebuilt."),
    ("d04", "Vistula",
     "The Vistula is the longest river in Poland, flowing about 1,000 kilometres from the Beskid mountains in the "
     "south to the Baltic Sea near Gdansk. Krakow and Warsaw both lie on its banks."),
    ("d05", "Mount Kilimanjaro",
     "Mount Kilimanjaro is a dormant volcano in Tanzania and the highest mountain in Africa, rising to about 5,895 "
     "metres above sea level. It has three volcanic cones: Kibo, Mawenzi and Shira."),
    ("d06", "Tanzania",
     "Tanzania is a country in East Africa. Its official capital is Dodoma, while Dar es Salaam is its largest city "
     "and main port. The country borders Lake Victoria, Lake Tanganyika and Lake Malawi."),
    ("d07", "Lake Victoria",
     "Lake Victoria is the largest lake in Africa by area and is shared by Tanzania, Uganda and Kenya. It is one of "
     "the main reservoirs feeding the White Nile."),
    ("d08", "Ada Lovelace",
     "Ada Lovelace was an English mathematician, the daughter of the poet Lord Byron. She wrote notes on Charles "
     "Babbage's proposed Analytical Engine that include what is often called the first published computer "
     "program, an algorithm to compute Bernoulli numbers."),
    ("d09", "Analytical Engine",
     "The Analytical Engine was a mechanical general-purpose computer designed by the English mathematician "
     "Charles Babbage in the 1830s. It was never completed during his lifetime, but its design had a memory unit "
     "and an arithmetic unit called the mill."),
    ("d10", "Lord Byron",
     "George Gordon Byron, known as Lord Byron, was an English Romantic poet. His works include the long narrative "
     "poems Don Juan and Childe Harold's Pilgrimage. He died in 1824 in Greece, where he had joined the Greek War "
     "of Independence."),
    ("d11", "Python (programming language)",
     "Python is a high-level programming language created by Guido van Rossum and first released in 1991. Its "
     "design emphasises code readability through significant indentation. The name comes from the British comedy "
     "group Monty Python."),
    ("d12", "Guido van Rossum",
     "Guido van Rossum is a Dutch programmer best known as the creator of the Python programming language. He "
     "began work on Python at the Centrum Wiskunde & Informatica in Amsterdam in the late 1980s."),
    ("d13", "Amsterdam",
     "Amsterdam is the capital and most populous city of the Netherlands. It is known for its canals, which were "
     "dug in the seventeenth century, and for museums such as the Rijksmuseum and the Van Gogh Museum."),
    ("d14", "Vincent van Gogh",
     "Vincent van Gogh was a Dutch post-impressionist painter. His well-known works include The Starry Night and "
     "a series of paintings of sunflowers. He painted The Starry Night in 1889 while staying at an asylum in "
     "Saint-Remy-de-Provence in France."),
    ("d15", "The Great Gatsby",
     "The Great Gatsby is a 1925 novel by the American writer F. Scott Fitzgerald. Set on Long Island during the "
     "Jazz Age, it is narrated by Nick Carraway and follows the millionaire Jay Gatsby."),
    ("d16", "F. Scott Fitzgerald",
     "Francis Scott Fitzgerald was an American novelist and short-story writer born in 1896 in Saint Paul, "
     "Minnesota. He was married to the writer Zelda Sayre."),
    ("d17", "Saint Paul, Minnesota",
     "Saint Paul is the capital of the US state of Minnesota. It sits on the Mississippi River next to "
     "Minneapolis; the two are known together as the Twin Cities."),
    ("d18", "Mississippi River",
     "The Mississippi River is one of the longest rivers in North America. It rises at Lake Itasca in Minnesota "
     "and flows south to the Gulf of Mexico, passing cities such as Saint Louis, Memphis and New Orleans."),
    ("d19", "Photosynthesis",
     "Photosynthesis is the process by which plants, algae and some bacteria use light energy to turn carbon "
     "dioxide and water into glucose. Oxygen is released as a by-product. In plants it takes place in "
     "chloroplasts, which contain the green pigment chlorophyll."),
    ("d20", "Chlorophyll",
     "Chlorophyll is the green pigment found in the chloroplasts of plants and algae. It absorbs mostly blue and "
     "red light and reflects green light, which is why leaves look green."),
    ("d21", "Great Wall of China",
     "The Great Wall of China is a series of fortifications built across northern China over many centuries. Much "
     "of the wall that survives today was built during the Ming dynasty."),
    ("d22", "Ming dynasty",
     "The Ming dynasty ruled China from 1368 to 1644. It was founded by the Hongwu Emperor and moved its capital "
     "from Nanjing to Beijing, where the Forbidden City was built."),
    ("d23", "Forbidden City",
     "The Forbidden City is a palace complex in the centre of Beijing. It served as the home of Chinese emperors "
     "from the Ming dynasty to the end of the Qing dynasty and now houses the Palace Museum."),
    ("d24", "Jupiter",
     "Jupiter is the fifth planet from the Sun and the largest planet in the Solar System. It is a gas giant made "
     "mostly of hydrogen and helium. Its Great Red Spot is a storm larger than the Earth."),
    ("d25", "Galileo Galilei",
     "Galileo Galilei was an Italian astronomer and physicist born in Pisa in 1564. In 1610 he observed four large "
     "moons orbiting Jupiter, now called the Galilean moons: Io, Europa, Ganymede and Callisto."),
    ("d26", "Ganymede (moon)",
     "Ganymede is the largest moon of Jupiter and the largest moon in the Solar System. It is larger than the "
     "planet Mercury and is the only moon known to have its own magnetic field."),
    ("d27", "Pisa",
     "Pisa is a city in the Tuscany region of central Italy, on the river Arno. It is best known for its leaning "
     "bell tower, the Leaning Tower of Pisa."),
    ("d28", "Insulin",
     "Insulin is a hormone made by the beta cells of the pancreas. It lowers blood sugar by helping cells take up "
     "glucose. It was first isolated for medical use in 1921 by Frederick Banting and Charles Best in Toronto."),
    ("d29", "Frederick Banting",
     "Frederick Banting was a Canadian medical scientist. He shared the 1923 Nobel Prize in Physiology or Medicine "
     "with John Macleod for the discovery of insulin."),
    ("d30", "Toronto",
     "Toronto is the capital of the Canadian province of Ontario and the most populous city in Canada. It lies on "
     "the north-western shore of Lake Ontario."),
)

#: (id, question, golden answers, supporting passage ids)
DEMO_QUESTIONS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("demo-01", "Which two elements did Marie Curie discover?", ("polonium and radium", "radium and polonium"),
     ("d01",)),
    ("demo-02", "What is the atomic number of polonium?", ("84",), ("d02",)),
    ("demo-03", "On which river does the capital of Poland lie?", ("Vistula", "Vistula River"), ("d03",)),
    ("demo-04", "Into which sea does the longest river in Poland flow?", ("Baltic Sea", "the Baltic"),
     ("d04",)),
    ("demo-05", "In which country is the highest mountain in Africa?", ("Tanzania",), ("d05",)),
    ("demo-06", "What is the official capital of the country where Mount Kilimanjaro stands?", ("Dodoma",),
     ("d05", "d06")),
    ("demo-07", "Who was the father of the mathematician who wrote notes on the Analytical Engine?",
     ("Lord Byron", "George Gordon Byron", "Byron"), ("d08", "d10")),
    ("demo-08", "Who designed the Analytical Engine?", ("Charles Babbage", "Babbage"), ("d09",)),
    ("demo-09", "In which city did the creator of Python begin work on the language?", ("Amsterdam",),
     ("d11", "d12")),
    ("demo-10", "In which year was Python first released?", ("1991",), ("d11",)),
    ("demo-11", "In which year did Vincent van Gogh paint The Starry Night?", ("1889",), ("d14",)),
    ("demo-12", "In which state capital was the author of The Great Gatsby born?",
     ("Saint Paul", "St. Paul", "Saint Paul, Minnesota"), ("d15", "d16")),
    ("demo-13", "Who narrates The Great Gatsby?", ("Nick Carraway",), ("d15",)),
    ("demo-14", "Where does the Mississippi River rise?", ("Lake Itasca",), ("d18",)),
    ("demo-15", "Which pigment in chloroplasts makes leaves look green?", ("chlorophyll",), ("d19", "d20")),
    ("demo-16", "During which dynasty was most of the surviving Great Wall of China built?",
     ("Ming dynasty", "Ming"), ("d21",)),
    ("demo-17", "Which emperor founded the dynasty that built most of the surviving Great Wall of China?",
     ("Hongwu Emperor", "Hongwu"), ("d21", "d22")),
    ("demo-18", "What is the largest moon in the Solar System?", ("Ganymede",), ("d26",)),
    ("demo-19", "In which city was the astronomer who discovered the Galilean moons born?", ("Pisa",), ("d25",)),
    ("demo-20", "In which city was insulin first isolated for medical use?", ("Toronto",), ("d28",)),
    ("demo-21", "On the shore of which lake lies the city where insulin was first isolated?",
     ("Lake Ontario", "Ontario"), ("d28", "d30")),
    ("demo-22", "Which lake is the largest in Africa by area?", ("Lake Victoria",), ("d07",)),
)
