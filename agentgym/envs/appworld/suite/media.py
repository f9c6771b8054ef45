"""Spotify and File System scenarios."""

from __future__ import annotations

import random

from . import ANSWER_ONLY, Draft, Scenario, login, register

_ARTISTS = ["The Paper Kites", "Nova Lane", "Echo Harbor", "Marisol Vega", "Blue Ember", "Kite Theory", "Lumen Drift",
            "Orchid Arcade", "Static Bloom", "June Avenue"]
_WORDS = ["Midnight", "Golden", "River", "Neon", "Paper", "Silver", "Quiet", "Wild", "Electric", "Velvet", "Hollow",
          "Summer", "Falling", "Northern", "Glass", "Ocean"]
_NOUNS = ["Lights", "Hearts", "Road", "Dreams", "Skies", "Echoes", "Fire", "Waves", "Letters", "Garden", "Rain",
          "Machines", "Shadows", "Streets"]
_GENRES = ["pop", "rock", "indie", "jazz", "electronic", "folk"]
_PLAYLISTS = ["Road trip", "Focus", "Sunday morning", "Workout", "Dinner party", "Late night", "Rainy day", "Throwbacks"]


def spotify_world(rng: random.Random, n_artists: int = 4, songs_per_artist: tuple[int, int] = (3, 5)):
    """Artists (ids 1..), one album each, their songs (ids 1.., distinct titles), and none of the supervisor's
    playlists yet."""
    artists = rng.sample(_ARTISTS, n_artists)
    titles = iter(rng.sample([f"{w} {x}" for w in _WORDS for x in _NOUNS], n_artists * (songs_per_artist[1] + 1)))
    seed = {"spotify.Artist": [{"name": a, "genre": rng.choice(_GENRES)} for a in artists],
            "spotify.Album": [], "spotify.Song": []}
    for i in range(n_artists):
        genre = seed["spotify.Artist"][i]["genre"]
        date = {"$datetime": f"20{rng.randint(10, 22)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T00:00:00"}
        seed["spotify.Album"].append({"title": next(titles), "artist_ids": [i + 1], "release_date": date,
                                      "genre": genre})
        for _ in range(rng.randint(*songs_per_artist)):
            seed["spotify.Song"].append({"title": next(titles), "artist_ids": [i + 1], "album_id": i + 1,
                                         "duration": rng.randint(150, 320), "release_date": date, "genre": genre})
    return artists, seed


def _new_playlist(rng: random.Random, n: int) -> Draft:
    _, seed = spotify_world(rng, 2)
    title = f"{rng.choice(_PLAYLISTS)} {rng.randint(2, 9)}"
    call = f"apis.spotify.create_playlist(title={title!r}, is_public={{public}}, access_token=tokens['spotify'])"
    return Draft(
        instruction=f'Create a private Spotify playlist named "{title}".',
        solution=[login("spotify"), call.format(public=False), "apis.supervisor.complete_task()"],
        wrong=[login("spotify"), call.format(public=True)],
        seed=seed, public_data={"title": title})


register(Scenario("gspotlist", ("spotify",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("spotify.Playlist")
    with test("exactly one playlist was created, mine, with the title"):
        test.case(len(added), "==", 1)
        test.case(len(updated) + len(removed), "==", 0)
        test.case(added[0].user_id, "==", 1)
        test.case(added[0].title, "==", public_data.title)
    with test("it is private"):
        test.case(added[0].is_public, "is", False)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "==", {"spotify.Playlist"})
''', draw=_new_playlist))


def _playlists(rng: random.Random, seed: dict, k: int = 3) -> list[str]:
    names = rng.sample(_PLAYLISTS, k)
    seed["spotify.Playlist"] = [{"title": t, "user_id": 1, "is_public": rng.random() < 0.5} for t in names]
    songs = len(seed["spotify.Song"])
    seed["spotify.PlaylistSong"] = [{"playlist_id": p, "song_id": s} for p in range(1, k + 1)
                                    for s in sorted(rng.sample(range(1, songs + 1), rng.randint(2, 5)))]
    return names


_FIND_PLAYLIST = ("lists = apis.spotify.show_playlist_library(page_limit=20, access_token=tokens['spotify'])\n"
                  "playlist = [p for p in lists if p['title'] == {title!r}][0]\n")


def _add_artist(rng: random.Random, n: int) -> Draft:
    artists, seed = spotify_world(rng, 4, (3, 5))
    names = _playlists(rng, seed)
    artist = rng.randrange(len(artists))
    target = rng.choice(names)
    p = names.index(target) + 1
    # The playlist holds none of the artist's songs yet.
    theirs = {i + 1 for i, s in enumerate(seed["spotify.Song"]) if s["artist_ids"] == [artist + 1]}
    seed["spotify.PlaylistSong"] = [x for x in seed["spotify.PlaylistSong"]
                                    if not (x["playlist_id"] == p and x["song_id"] in theirs)]
    body = (_FIND_PLAYLIST.format(title=target)
            + f"artist = [a for a in apis.spotify.search_artists(query={artists[artist]!r}, "
            f"access_token=tokens['spotify']) if a['name'] == {artists[artist]!r}][0]\n"
            "songs = apis.spotify.search_songs(artist_id=artist['artist_id'], page_limit={limit}, "
            "access_token=tokens['spotify'])\nfor s in songs:\n"
            "    apis.spotify.add_song_to_playlist(playlist_id=playlist['playlist_id'], song_id=s['song_id'], "
            "access_token=tokens['spotify'])")
    return Draft(
        instruction=f'Add every song by {artists[artist]} to my Spotify playlist "{target}".',
        solution=[login("spotify"), body.replace("{limit}", "20"), "apis.supervisor.complete_task()"],
        wrong=[login("spotify"), body.replace("{limit}", "2")],  # forgets that results come in pages
        seed=seed, public_data={"artist": artists[artist], "playlist": target})


register(Scenario("gspotadd", ("spotify",), 2, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    artist = models.start.spotify.Artist.find_one(name=public_data.artist)
    playlist = models.start.spotify.Playlist.find_one(user_id=1, title=public_data.playlist)
    theirs = {s.id for s in models.start.spotify.Song.all() if artist.id in s.artist_ids}
    added, updated, removed = models.changed_records("spotify.PlaylistSong")
    with test("exactly the artist's songs were added to that playlist"):
        test.case({(x.playlist_id, x.song_id) for x in added}, "==", {(playlist.id, s) for s in theirs})
        test.case(len(updated) + len(removed), "==", 0)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "in", [{"spotify.PlaylistSong"},
                                                      {"spotify.PlaylistSong", "spotify.Playlist"}])
''', draw=_add_artist))


def _count(rng: random.Random, n: int) -> Draft:
    _, seed = spotify_world(rng, 3)
    names = _playlists(rng, seed)
    target = rng.choice(names)
    p = names.index(target) + 1
    answer = sum(1 for x in seed["spotify.PlaylistSong"] if x["playlist_id"] == p)
    return Draft(
        instruction=f'How many songs are in my Spotify playlist "{target}"?',
        solution=[login("spotify"), _FIND_PLAYLIST.format(title=target)
                  + "shown = apis.spotify.show_playlist(playlist_id=playlist['playlist_id'], "
                  "access_token=tokens['spotify'])\napis.supervisor.complete_task(answer=len(shown['songs']))"],
        # (counts the songs of every playlist)
        wrong=[login("spotify"), "lists = apis.spotify.show_playlist_library(page_limit=20, "
               "access_token=tokens['spotify'])\ntotal = sum(len(apis.spotify.show_playlist(playlist_id="
               "p['playlist_id'], access_token=tokens['spotify'])['songs']) for p in lists)\n"
               "apis.supervisor.complete_task(answer=total)"],
        seed=seed, public_data={"playlist": target}, answer=answer)


register(Scenario("gspotcount", ("spotify",), 1, "gen-dev", evaluation=ANSWER_ONLY, draw=_count))


HOME = "/home/morgan/"
_FILES = ["budget", "itinerary", "resume", "lease", "invoice", "receipt", "notes", "agenda", "manual", "syllabus",
          "report", "contract", "checklist", "minutes"]


def files_world(rng: random.Random, downloads: list[str]):
    """The supervisor's home with documents/, documents/pdfs/, downloads/ (holding ``downloads``), notes/."""
    dirs = ["", "documents/", "documents/pdfs/", "downloads/", "notes/"]
    seed = {"file_system.Directory": [{"path": HOME + d, "user_id": 1} for d in dirs],
            "file_system.File": [{"path": HOME + "downloads/" + f, "user_id": 1,
                                  "content": f"{f} v{rng.randint(1, 9)}"} for f in downloads]}
    seed["file_system.File"] += [{"path": HOME + "documents/" + f"{rng.choice(_FILES)}-{i}.txt", "user_id": 1,
                                  "content": "kept"} for i in range(2)]
    return seed


def _make_file(rng: random.Random, n: int) -> Draft:
    seed = files_world(rng, [f"{f}.pdf" for f in rng.sample(_FILES, 2)])
    name = f"{rng.choice(_FILES)}-{rng.randint(10, 99)}"
    content = f"{rng.choice(['Pick up', 'Call', 'Pay', 'Renew'])} {rng.choice(_FILES)} by Friday"
    call = ("apis.file_system.create_file(file_path={path!r}, content={content!r}, "
            "access_token=tokens['file_system'])")
    return Draft(
        instruction=f'Create the file ~/notes/{name}.txt containing "{content}".',
        solution=[login("file_system"), call.format(path=f"~/notes/{name}.txt", content=content),
                  "apis.supervisor.complete_task()"],
        wrong=[login("file_system"), call.format(path=f"~/documents/{name}.txt", content=content)],
        seed=seed, public_data={"path": f"{HOME}notes/{name}.txt", "content": content})


register(Scenario("gfilemake", ("file_system",), 1, "gen-train", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    added, updated, removed = models.changed_records("file_system.File")
    with test("exactly one file was created, at the path"):
        test.case(len(added), "==", 1)
        test.case(len(updated) + len(removed), "==", 0)
        test.case(added[0].path, "==", public_data.path)
    with test("with the content"):
        test.case(added[0].content.strip(), "==", public_data.content)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "in", [{"file_system.File"},
                                                      {"file_system.File", "file_system.Directory"}])
''', draw=_make_file))


def _move_pdfs(rng: random.Random, n: int) -> Draft:
    names = rng.sample(_FILES, 7)
    pdfs = [f"{x}.pdf" for x in names[:rng.randint(3, 5)]]
    others = [f"{x}.{rng.choice(['txt', 'docx', 'jpg'])}" for x in names[len(pdfs):]]
    downloads = pdfs + others
    rng.shuffle(downloads)
    seed = files_world(rng, downloads)
    loop = ("paths = apis.file_system.show_directory(directory_path='~/downloads/', entry_type='files', "
            "recursive=False, access_token=tokens['file_system'])\nfor path in paths:\n"
            "    if path.endswith('.pdf'):\n"
            "        apis.file_system.{op}(source_file_path=path, destination_file_path='~/documents/pdfs/' + "
            "path.split('/')[-1], access_token=tokens['file_system'])")
    return Draft(
        instruction="Move every .pdf file in my ~/downloads folder into ~/documents/pdfs, keeping their names.",
        solution=[login("file_system"), loop.format(op="move_file"), "apis.supervisor.complete_task()"],
        wrong=[login("file_system"), loop.format(op="copy_file")],  # copies: the downloads keep them
        seed=seed, public_data={"pdfs": sorted(pdfs)})


register(Scenario("gfileorg", ("file_system",), 2, "gen-test", evaluation='''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    home = "/home/morgan/"
    added, updated, removed = models.changed_records("file_system.File")
    with test("exactly the pdfs left downloads"):
        test.case(sorted(f.path for f in removed), "==", sorted(home + "downloads/" + n for n in public_data.pdfs))
        test.case(len(updated), "==", 0)
    with test("and are in documents/pdfs, with their names and contents"):
        moved = {f.path.split("/")[-1]: f.content for f in removed}
        test.case(sorted(f.path for f in added), "==", sorted(home + "documents/pdfs/" + n for n in public_data.pdfs))
        test.case({f.path.split("/")[-1]: f.content for f in added}, "==", moved)
    with test("nothing else changed (collateral damage)"):
        test.case(models.changed_model_names(), "in", [{"file_system.File"},
                                                      {"file_system.File", "file_system.Directory"}])
''', draw=_move_pdfs))
